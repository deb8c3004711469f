"""A fake of Marathon's REST API (the request and response shapes of Marathon 1.x) for tests."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class MarathonState:
    """What the fake holds; tests set the knobs, the handler reads and writes under `lock`."""

    task_addresses: list[tuple[str, int]]
    polls_until_done: int = 2  # GET /v2/deployments answers with the deployment this many times
    never_finish: bool = False
    reject: bool = False
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


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
    server: _HealthServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps(self.server.health()).encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HealthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, role: str) -> None:
        super().__init__(("127.0.0.1", 0), _HealthHandler)
        self.role = role
        self.leader: str | None = None

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

    def health(self, role: str) -> _HealthServer:
        server = _HealthServer(role)
        self._start(server, f"fake-health-{role}")
        return server

    def close(self) -> None:
        for server, thread in reversed(self._servers):
            server.shutdown()
            server.server_close()
            thread.join(5)
        self._servers.clear()
