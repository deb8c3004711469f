"""`POST /api/v1/scheduler` after the HTTP checks: SUBSCRIBE and the calls pymesos's
MesosSchedulerDriver makes (ACCEPT, DECLINE, KILL, RECONCILE, ACKNOWLEDGE, ...).

Errors are raised as CallError only where Mesos answers with that status; any other problem
is answered 202 and reported later through updates, because pymesos dies on a 4xx.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from .launch import accept, offer_ids, refuse_seconds
from .master import Framework, Master
from .protocol import (
    TERMINAL_STATES,
    CallError,
    Json,
    decode_uuid,
    event,
    id_value,
    wrap,
)
from .streams import EventStream

log = logging.getLogger(__name__)

# Calls whose payload Mesos requires (validation.cpp: "Expecting 'x' to be present").
_PAYLOAD_REQUIRED = {
    "ACCEPT": "accept",
    "DECLINE": "decline",
    "ACCEPT_INVERSE_OFFERS": "accept_inverse_offers",
    "DECLINE_INVERSE_OFFERS": "decline_inverse_offers",
    "KILL": "kill",
    "SHUTDOWN": "shutdown",
    "ACKNOWLEDGE": "acknowledge",
    "ACKNOWLEDGE_OPERATION_STATUS": "acknowledge_operation_status",
    "RECONCILE": "reconcile",
    "RECONCILE_OPERATIONS": "reconcile_operations",
    "MESSAGE": "message",
    "REQUEST": "request",
    "UPDATE_FRAMEWORK": "update_framework",
}
_NO_PAYLOAD = {"TEARDOWN", "REVIVE", "SUPPRESS"}


def subscribe(master: Master, call: Json, principal: str | None) -> EventStream:
    """Validate a SUBSCRIBE and open its stream. Raises CallError(400) as Mesos does."""
    payload = call.get("subscribe")
    if not isinstance(payload, dict) or not isinstance(payload.get("framework_info"), dict):
        raise CallError(400, "Expecting 'subscribe' to be present")
    info: Json = dict(payload["framework_info"])
    problems = [k for k in ("user", "name") if not isinstance(info.get(k), str)]
    if problems:
        raise CallError(400, f"Missing required fields: framework_info.{', '.join(problems)}")
    call_id, info_id = id_value(call, "framework_id"), id_value(info, "id")
    if call_id is not None and call_id != info_id:
        raise CallError(400, "'framework_id' differs from 'subscribe.framework_info.id'")
    if principal is not None:
        if info.get("principal") not in (None, principal):
            raise CallError(400, "Authenticated principal does not match framework's principal")
        info["principal"] = principal

    with master.lock:
        framework_id = info_id or master.new_framework_id()
        stream = EventStream(
            f"framework {framework_id}",
            master.heartbeat_interval_s,
            on_closed=lambda s: master.stream_closed(framework_id, s),
        )
        stream.stream_id = str(uuid.uuid4())
        refusal = _refusal(master, framework_id, info)
        if refusal is not None:
            log.warning("framework %s: subscription refused: %s", framework_id, refusal)
            stream.send(event("ERROR", {"message": refusal}))
            stream.close()
            return stream
        info["id"] = wrap(framework_id)
        framework = master.frameworks.get(framework_id)
        if framework is None:
            framework = Framework(framework_id, info)
            master.frameworks[framework_id] = framework
            log.info("framework %s (%s): subscribed", framework_id, info.get("name"))
        else:
            if framework.stream is not None:
                framework.stream.send(event("ERROR", {"message": "Framework failed over"}))
                framework.stream.close()
            # As Mesos on failover: the old instance's offers go and their resources are
            # offered again (to the new instance among others); its stream's close comes
            # later and no longer matches the framework's stream.
            master.offers.remove_where(framework_id=framework_id)
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
                framework.failover_timer = None
            framework.info = info
            framework.reregistered_time = time.time()
            log.info("framework %s (%s): re-subscribed", framework_id, info.get("name"))
        framework.stream = stream
        framework.connected = framework.active = True
        framework.suppressed = bool(payload.get("suppressed_roles"))
        stream.send(
            event(
                "SUBSCRIBED",
                {
                    "framework_id": wrap(framework_id),
                    "heartbeat_interval_seconds": master.heartbeat_interval_s,
                    "master_info": master.master_info(),
                },
            )
        )
        stream.send(event("HEARTBEAT"))
        for agent in master.agents.values():
            if framework_id in agent.frameworks:
                agent.frameworks[framework_id] = info
                if agent.id not in master.reregistering:  # else: resent once it re-registers
                    agent.updates.resend(framework_id)
        master.request_allocation()
        return stream


def _refusal(master: Master, framework_id: str, info: Json) -> str | None:
    if framework_id in master.removed_framework_ids:
        return "Framework has been removed"
    timeout = info.get("failover_timeout", 0.0)
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        return "Invalid framework's failover timeout"
    roles = info.get("roles") or []
    role = info.get("role")
    for name in [*roles, *([role] if role is not None else [])]:
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name[:1]:
            return f"Invalid role {name!r}"
    return None


def handle_call(
    master: Master, call: Json, stream_id: str | None, principal: str | None
) -> tuple[int, Callable[[], None] | None]:
    """Validate and apply a non-SUBSCRIBE call; returns the HTTP status (202, or 200) and what
    is left to apply once the answer is written (None: nothing). An ACCEPT is answered first
    and its launch applied after, as Mesos answers it once it has the call (its launch waits
    for authorization, asynchronously); the server applies it before reading the connection's
    next call."""
    kind = call.get("type")
    if not isinstance(kind, str):
        raise CallError(400, "Expecting 'type' to be present")
    if kind == "UNKNOWN":
        raise CallError(501, "Received an unknown call type")
    if kind not in _PAYLOAD_REQUIRED and kind not in _NO_PAYLOAD:
        raise CallError(400, f"Failed to convert JSON into Call protobuf: unknown type {kind!r}")
    framework_id = id_value(call, "framework_id")
    if framework_id is None:
        raise CallError(400, "Expecting 'framework_id' to be present")
    payload: Any = call.get(_PAYLOAD_REQUIRED.get(kind, kind.lower()))
    if kind in _PAYLOAD_REQUIRED and not isinstance(payload, dict):
        raise CallError(400, f"Expecting '{_PAYLOAD_REQUIRED[kind]}' to be present")
    if kind == "ACKNOWLEDGE":
        decode_uuid(payload.get("uuid"))
        if id_value(payload, "agent_id") is None or id_value(payload, "task_id") is None:
            raise CallError(400, "Expecting 'agent_id' and 'task_id' in 'acknowledge'")
    with master.lock:
        framework = master.frameworks.get(framework_id)
        if framework is None:
            raise CallError(400, "Framework cannot be found")
        if principal is not None and framework.info.get("principal") not in (None, principal):
            raise CallError(400, "Authenticated principal does not match framework's principal")
        if not framework.connected or framework.stream is None:
            raise CallError(403, "Framework is not subscribed")
        if stream_id is None:
            raise CallError(400, "All non-subscribe calls should include 'Mesos-Stream-Id'")
        if stream_id != framework.stream.stream_id:
            raise CallError(
                400,
                f"The stream ID '{stream_id}' included in this request didn't match the stream "
                f"ID currently associated with framework ID {framework_id}",
            )
        if kind == "ACCEPT":
            return 202, functools.partial(_accept_later, master, framework, payload)
        body = payload if isinstance(payload, dict) else {}
        return _dispatch(master, framework, kind, body), None


def _accept_later(master: Master, framework: Framework, payload: Json) -> None:
    with master.lock:
        if master.frameworks.get(framework.id) is not framework:
            # Removed meanwhile: Mesos's launch finds no framework and recovers the offers.
            log.info("framework %s: removed before its ACCEPT was applied", framework.id)
            return
        accept(master, framework, payload)


def _dispatch(master: Master, framework: Framework, kind: str, payload: Json) -> int:
    if kind == "TEARDOWN":
        master.remove_framework(framework, "TEARDOWN")
    elif kind == "DECLINE":
        _decline(master, framework, payload)
    elif kind == "REVIVE":
        master.offers.clear_filters(framework.id)
        framework.suppressed = False
        master.request_allocation()
    elif kind == "SUPPRESS":
        framework.suppressed = True
    elif kind == "KILL":
        _kill(master, framework, payload)
    elif kind == "SHUTDOWN":
        agent = master.agents.get(id_value(payload, "agent_id") or "")
        executor_id = id_value(payload, "executor_id")
        if agent is not None and executor_id is not None:
            agent.shutdown_executor(framework.id, executor_id)
    elif kind == "ACKNOWLEDGE":
        _acknowledge(master, framework, payload)
    elif kind == "RECONCILE":
        tasks = payload.get("tasks") or []
        master.reconcile(framework, [t for t in tasks if isinstance(t, dict)])
    elif kind == "MESSAGE":
        _message(master, framework, payload)
    elif kind == "UPDATE_FRAMEWORK":
        info = payload.get("framework_info")
        if isinstance(info, dict) and id_value(info, "id") == framework.id:
            framework.info = {**info, "id": wrap(framework.id)}
        return 200
    else:  # REQUEST, inverse offers, operation feedback: accepted and ignored
        log.debug("framework %s: %s ignored", framework.id, kind)
    return 202


def _decline(master: Master, framework: Framework, payload: Json) -> None:
    refuse_s = refuse_seconds(payload)
    for offer_id in offer_ids(payload):
        offer = master.offers.offers.get(offer_id)
        if offer is None or offer.framework_id != framework.id:
            continue  # unknown offers are ignored (master.cpp decline)
        master.offers.take(offer.id)
        master.offers.add_filter(framework.id, offer.agent_id, offer.resources, refuse_s)
    master.request_allocation()


def _kill(master: Master, framework: Framework, payload: Json) -> None:
    task_id = id_value(payload, "task_id")
    if task_id is None:
        return
    task = framework.tasks.get(task_id)
    if task is None:
        master.reconcile(framework, [{"task_id": wrap(task_id)}])
        return
    if task.state in TERMINAL_STATES or task.agent_id in master.reregistering:
        return  # a task on an agent not re-registered after a failover is unknown: no reply
    agent = master.agents.get(task.agent_id)
    if agent is not None:
        agent.kill_task(framework.id, task_id, payload.get("kill_policy"))


def _acknowledge(master: Master, framework: Framework, payload: Json) -> None:
    agent = master.agents.get(id_value(payload, "agent_id") or "")
    task_id = id_value(payload, "task_id") or ""
    if agent is None:
        log.info("task %s: acknowledgement for an unknown agent dropped", task_id)
        return
    acked = agent.updates.acknowledge(framework.id, task_id, payload["uuid"])
    task = framework.tasks.get(task_id)
    if acked is None or task is None:
        return
    if task.update_uuid == acked.get("uuid"):  # else the next head was forwarded already
        task.update_state = task.update_uuid = None
    if acked.get("state") in TERMINAL_STATES:
        master.complete_task(framework, task)


def _message(master: Master, framework: Framework, payload: Json) -> None:
    agent = master.agents.get(id_value(payload, "agent_id") or "")
    executor_id = id_value(payload, "executor_id") or ""
    executor = agent.live_executor(framework.id, executor_id) if agent else None
    if executor is None or executor.stream is None or not isinstance(payload.get("data"), str):
        log.info("framework %s: message to executor %s dropped", framework.id, executor_id)
        return
    executor.stream.send(event("MESSAGE", {"data": payload["data"]}))
