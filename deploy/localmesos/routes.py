"""HTTP endpoints of the master port and of each agent port.

HTTP-level checks of the scheduler API happen here in the order the Mesos master makes them: Basic
auth (401), method (405), Content-Type (400/415), JSON (400), then Accept (406) and the
Mesos-Stream-Id header for SUBSCRIBE; call-level checks are in `scheduler_api.py`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import executor_api, scheduler_api, state
from .httpserver import Request, Response, Route, StreamResponse
from .protocol import CallError, Json, id_value

if TYPE_CHECKING:
    from .agent import Agent
    from .cluster import LocalMesos

log = logging.getLogger(__name__)

_REALM = 'Basic realm="mesos-master-scheduler"'


def _json(status: int, body: Any) -> Response:
    return Response(status, json.dumps(body).encode("utf-8"), "application/json")


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, message.encode("utf-8"), headers=dict(headers or {}))


def _parse_json_call(request: Request) -> Json:
    """Method, Content-Type and JSON checks shared by the v1 endpoints. Raises CallError."""
    if request.method != "POST":
        raise CallError(405, f"Expecting 'POST', received '{request.method}'")
    content_type = request.headers.get("Content-Type")
    if content_type is None:
        raise CallError(400, "Expecting 'Content-Type' to be present")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise CallError(415, f"Expecting 'Content-Type' of application/json, got {content_type}")
    try:
        call = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CallError(400, f"Failed to parse body into JSON: {exc}") from exc
    if not isinstance(call, dict):
        raise CallError(400, "Failed to convert JSON into Call protobuf: not an object")
    return call


def _accepts_json(accept: str | None) -> bool:
    if not accept:
        return True
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(kinds & {"application/json", "application/*", "*/*", "application/x-protobuf"})


def _principal(cluster: LocalMesos, request: Request) -> str | None:
    """The authenticated principal, None when auth is off. Raises CallError(401)."""
    if not cluster.credentials:
        return None
    header = request.headers.get("Authorization") or ""
    scheme, _, token = header.partition(" ")
    try:
        principal, _, secret = base64.b64decode(token, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        principal = secret = ""
    if scheme.lower() != "basic" or cluster.credentials.get(principal) != secret or not secret:
        raise CallError(401, "Unauthorized")
    return principal


def master_routes(cluster: LocalMesos) -> dict[str, Route]:
    master = cluster.master

    def version(request: Request) -> Response:
        return _json(200, state.version_json())

    def health(request: Request) -> Response:
        return Response(200)

    def master_state(request: Request) -> Response:
        with master.lock:
            return _json(200, state.master_state(master))

    def scheduler(request: Request) -> Response | StreamResponse:
        try:
            principal = _principal(cluster, request)
            call = _parse_json_call(request)
            if call.get("type") == "SUBSCRIBE":
                if not _accepts_json(request.headers.get("Accept")):
                    raise CallError(406, "Expecting 'Accept' to allow application/json")
                if request.headers.get("Mesos-Stream-Id") is not None:
                    raise CallError(
                        400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
                    )
                return StreamResponse(scheduler_api.subscribe(master, call, principal))
            status, then = scheduler_api.handle_call(
                master, call, request.headers.get("Mesos-Stream-Id"), principal
            )
            return Response(status, then=then)
        except CallError as exc:
            return _refusal(exc)

    def operator(request: Request) -> Response:
        try:
            call = _parse_json_call(request)
            with master.lock:
                return _json(200, state.operator_call(master, call))
        except CallError as exc:
            return _refusal(exc)

    def executor(request: Request) -> Response | StreamResponse:
        try:
            call = _parse_json_call(request)
        except CallError as exc:
            return _refusal(exc)
        agent = cluster.agent_of_executor(
            id_value(call, "framework_id") or "", id_value(call, "executor_id") or ""
        )
        if agent is None:
            return _text(400, "Executor cannot be found")
        return _executor_call(agent, call)

    def fault(name: str) -> Route:
        def handle(request: Request) -> Response:
            try:
                args = _parse_json_call(request)
                return _json(200, cluster.inject_fault(name, args))
            except CallError as exc:
                return _refusal(exc)

        return handle

    routes: dict[str, Route] = {
        "/version": version,
        "/health": health,
        "/master/health": health,
        "/master/state": master_state,
        "/master/state.json": master_state,
        "/state": master_state,
        "/state.json": master_state,
        "/api/v1/scheduler": scheduler,
        "/master/api/v1/scheduler": scheduler,
        "/api/v1": operator,
        "/api/v1/operator": operator,
        "/master/api/v1": operator,
        "/api/v1/executor": executor,
    }
    for name in ("remove_agent", "add_agent", "kill_executor", "master_failover"):
        routes[f"/faults/{name}"] = fault(name)
    return routes


def agent_routes(cluster: LocalMesos, agent: Agent) -> dict[str, Route]:
    master = cluster.master

    def version(request: Request) -> Response:
        return _json(200, state.version_json())

    def health(request: Request) -> Response:
        return Response(200)

    def agent_state(request: Request) -> Response:
        with master.lock:
            return _json(200, state.agent_state(master, agent))

    def executor(request: Request) -> Response | StreamResponse:
        try:
            call = _parse_json_call(request)
        except CallError as exc:
            return _refusal(exc)
        return _executor_call(agent, call)

    return {
        "/version": version,
        "/health": health,
        "/state": agent_state,
        "/state.json": agent_state,
        "/slave(1)/state": agent_state,
        "/slave(1)/state.json": agent_state,
        "/api/v1/executor": executor,
        "/slave(1)/api/v1/executor": executor,
        # The sandboxes' files, outside the state lock (file I/O must not stall the agent).
        "/files/read": agent.files.read,
        "/files/read.json": agent.files.read,
        "/files/browse": agent.files.browse,
        "/files/browse.json": agent.files.browse,
    }


def _executor_call(agent: Agent, call: Json) -> Response | StreamResponse:
    try:
        with agent.lock:
            if not agent.active:
                raise CallError(503, "Agent is not active")
            if call.get("type") == "SUBSCRIBE":
                return StreamResponse(executor_api.subscribe(agent, call))
            executor_api.handle_call(agent, call)
        return Response(202)
    except CallError as exc:
        return _refusal(exc)


def _refusal(exc: CallError) -> Response:
    headers = {"WWW-Authenticate": _REALM} if exc.http_status == 401 else None
    if exc.http_status == 405:
        headers = {"Allow": "POST"}
    log.info("refused with %d: %s", exc.http_status, exc.message)
    return _text(exc.http_status, exc.message, headers)
