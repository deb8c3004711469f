"""A fake of Marathon's REST API (the request and response shapes of Marathon 1.x) for tests.

It checks each app it is given against Marathon's app definition rules (`app_schema`), and
validates what Marathon validates about secrets: a non-empty `secrets` field and `env` entries
of the form `{"secret": NAME}` need the `secrets` feature (`--enable_features secrets`), and each
reference must name a secret of the app. Errors are Marathon's 422 body (`message`, `details`
with `path` and `errors`). Like Marathon without a secrets plugin, it never resolves a secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.marathon import app_schema


@dataclass
class MarathonState:
    """What the fake holds; tests set the knobs, the handler reads and writes under `lock`."""

    task_addresses: list[tuple[str, int]]
    polls_until_done: int = 2  # GET /v2/deployments answers with the deployment this many times
    never_finish: bool = False
    reject: bool = False
    # The operator's Marathon flags; "secrets" also needs a secrets plugin to deliver values.
    enabled_features: frozenset[str] = frozenset({"secrets"})
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_SECRETS_DISABLED = "Feature secrets is not enabled. Enable with --enable_features secrets)"


def _violations(app: dict[str, Any], features: frozenset[str]) -> list[dict[str, Any]]:
    """Marathon's validation of the app's fields (`app_schema`), of `secrets` and of `env`
    values, as 422 `details`."""
    found: list[dict[str, Any]] = app_schema.problems(app)
    secrets = app.get("secrets") or {}
    env = app.get("env") or {}
    if not isinstance(secrets, dict) or not isinstance(env, dict):
        return [{"path": "/", "errors": ["error.expected.jsobject"]}]
    if secrets and "secrets" not in features:
        found.append({"path": "/secrets", "errors": [_SECRETS_DISABLED]})
    for name, secret in secrets.items():
        source = secret.get("source") if isinstance(secret, dict) else None
        if not name or not isinstance(source, str) or not source:
            found.append({"path": f"/secrets/{name}/source", "errors": ["must not be empty"]})
    refs = {k: v for k, v in env.items() if isinstance(v, dict)}
    if refs and "secrets" not in features:
        found.append(
            {
                "path": "/env",
                "errors": [
                    "use of secret-references in the environment requires the secrets "
                    "feature to be enabled"
                ],
            }
        )
    for key, value in env.items():
        if isinstance(value, dict):
            if set(value) != {"secret"} or value["secret"] not in secrets:
                found.append({"path": f"/env/{key}", "errors": ["references an undefined secret"]})
        elif not isinstance(value, str):
            found.append({"path": f"/env/{key}", "errors": ["error.expected.jsstring"]})
    return found


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length))

    def _new_deployment(self, app_id: str) -> str:
        state = self.server.state
        deployment_id = f"dep-{len(state.deployments) + 1}"
        state.deployments[deployment_id] = {"id": deployment_id, "affectedApps": [app_id]}
        state.polls = 0
        return deployment_id

    def do_POST(self) -> None:
        state = self.server.state
        app = self._body()
        with state.lock:
            state.requests.append(("POST", self.path))
            if self.path != "/v2/apps":
                return self._send(404, {"message": "not found"})
            if state.reject:
                return self._send(
                    422,
                    {
                        "message": "Object is not valid",
                        "details": [
                            {"path": "/cpus", "errors": ["error.min"]},
                            {"path": "/constraints(0)", "errors": ["Invalid constraint"]},
                        ],
                    },
                )
            violations = _violations(app, state.enabled_features)
            if violations:
                return self._send(422, {"message": "Object is not valid", "details": violations})
            if app["id"] in state.apps:
                return self._send(409, {"message": f"An app with id [{app['id']}] already exists."})
            state.apps[app["id"]] = app
            deployment_id = self._new_deployment(app["id"])
            self._send(201, {**app, "deployments": [{"id": deployment_id}]})

    def do_PUT(self) -> None:
        state = self.server.state
        app = self._body()
        with state.lock:
            state.requests.append(("PUT", self.path))
            app_id = self.path.removeprefix("/v2/apps")
            if app_id not in state.apps:
                return self._send(404, {"message": f"App '{app_id}' does not exist"})
            violations = _violations(app, state.enabled_features)
            if violations:
                return self._send(422, {"message": "Object is not valid", "details": violations})
            state.apps[app_id] = app
            deployment_id = self._new_deployment(app_id)
            self._send(200, {"version": "2024-01-01T00:00:00.000Z", "deploymentId": deployment_id})

    def do_GET(self) -> None:
        state = self.server.state
        with state.lock:
            state.requests.append(("GET", self.path))
            if self.path == "/v2/deployments":
                state.polls += 1
                if state.polls > state.polls_until_done and not state.never_finish:
                    state.deployments.clear()
                return self._send(200, list(state.deployments.values()))
            app_id = self.path.removeprefix("/v2/apps")
            app = state.apps.get(app_id)
            if app is None:
                return self._send(404, {"message": f"App '{app_id}' does not exist"})
            tasks = [
                {
                    "id": f"{app_id.strip('/')}.{n}",
                    "host": host,
                    "ports": [port],
                    "healthCheckResults": [{"alive": True}],
                }
                for n, (host, port) in enumerate(state.task_addresses[: app["instances"]])
            ]
            self._send(
                200,
                {
                    "app": {
                        **app,
                        "tasks": tasks,
                        "tasksRunning": len(tasks),
                        "tasksHealthy": len(tasks),
                        "deployments": [
                            {"id": d["id"]}
                            for d in state.deployments.values()
                            if app_id in d["affectedApps"]
                        ],
                    }
                },
            )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: MarathonState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class _HealthHandler(BaseHTTPRequestHandler):
    server: FakeReplica

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _login(self) -> tuple[str, str] | None:
        kind, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if kind.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return user, password

    def do_GET(self) -> None:
        status: int = 404
        answer: Any = None
        headers: dict[str, str] = {}
        if self.path == "/health":
            status, answer = 200, self.server.health()
        elif self.path == "/api/job/jobs":
            # The replica's REST API: HTTP Basic auth, 401 with a challenge when it fails.
            login = self._login()
            self.server.tried.append(login)
            if login in self.server.accepted_logins:
                status, answer = 200, []
            else:
                status, answer = (
                    401,
                    {"error": "wrong user name or password", "type": "Unauthorized"},
                )
                headers = {"WWW-Authenticate": 'Basic realm="Elastic Job Console Auth"'}
        else:
            answer = {"error": f"no such path {self.path}", "type": "NotFound"}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class FakeReplica(ThreadingHTTPServer):
    """A scheduler replica as the deploy command sees it: `/health` and one REST API route."""

    daemon_threads = True

    def __init__(self, role: str) -> None:
        super().__init__(("127.0.0.1", 0), _HealthHandler)
        self.role = role
        self.leader: str | None = None
        # Logins its REST API accepts: none, as a replica with password hashes it got from the
        # secret store; the defaults, as one that got nothing.
        self.accepted_logins: set[tuple[str, str]] = set()
        self.tried: list[tuple[str, str] | None] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def health(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "leader": self.leader,
            "zookeeper": "CONNECTED",
            "identity": self.address,
            "pid": 1,
        }


class Served:
    """Starts HTTP servers on threads and stops every one of them in `close`."""

    def __init__(self) -> None:
        self._servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def _start(self, server: ThreadingHTTPServer, name: str) -> None:
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        thread.start()
        self._servers.append((server, thread))

    def marathon(self, state: MarathonState) -> str:
        server = _Server(state)
        self._start(server, "fake-marathon")
        return f"http://127.0.0.1:{server.server_address[1]}"

    def health(self, role: str) -> FakeReplica:
        server = FakeReplica(role)
        self._start(server, f"fake-health-{role}")
        return server

    def close(self) -> None:
        for server, thread in reversed(self._servers):
            server.shutdown()
            server.server_close()
            thread.join(5)
        self._servers.clear()
