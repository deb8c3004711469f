"""Scheduler replicas as real `python -m scheduler` processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from deploy import children
from deploy.zookeeper import free_port
from tests.support.http import exchange

ROOT = Path(__file__).resolve().parents[2]


def http_get(
    url: str, timeout_s: float = 2.0, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """GET without following redirects: (status, headers, body)."""
    answer = exchange("GET", url, headers=headers, timeout_s=timeout_s, follow_redirects=False)
    return answer.status, dict(answer.headers), answer.body


class ReplicaProcess:
    """One replica process on a free port, logging to `log_dir`.

    It runs in a process group of its own and dies with the thread that started it.
    `module` is what `python -m` runs (a test wrapper of `scheduler`, such as
    `tests.support.skewed_clock`), with `env` added to the environment.
    """

    def __init__(
        self,
        zk_servers: str,
        log_dir: Path,
        *,
        module: str = "scheduler",
        env: dict[str, str] | None = None,
        **settings: Any,
    ) -> None:
        self.module = module
        self.env = env
        self.port = int(settings.pop("http_port", 0)) or free_port()
        self.identity = f"127.0.0.1:{self.port}"
        self.log_path = log_dir / f"replica-{self.port}.log"
        self.settings = {
            "zk_servers": zk_servers,
            "hostname": "127.0.0.1",
            "http_bind_address": "127.0.0.1",
            "http_port": str(self.port),
            "zk_session_timeout_seconds": "4",
            "leader_retry_backoff_seconds": "0.5",
            "data_dir": str(log_dir / "data"),
            **{k: str(v) for k, v in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ReplicaProcess:
        args = [sys.executable, "-m", self.module]
        for key, value in self.settings.items():
            args += [f"--{key}", value]
        env = None if self.env is None else {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = children.start(
                args,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        """True until the replica exits. It is this process's child, so `poll()` reaps it the
        moment it exits: like `tests.support.processes.pid_alive`, an exited replica is never
        seen as a live zombie, and its pid is never confused with a reused one."""
        return self.proc is not None and self.proc.poll() is None

    def health(self) -> dict[str, Any] | None:
        """The /health body (200 or 503, whose `reason` says why), or None without an answer."""
        got = self.health_status()
        return None if got is None else got[1]

    def health_status(self) -> tuple[int, dict[str, Any]] | None:
        """(status, body) of /health when it answers 200 or 503 with JSON, else None.

        Sent with the admin's credentials when the test knows its plain password (the full body;
        without credentials /health shows only role, leader and connection states).
        """
        try:
            status, _, body = http_get(
                f"http://{self.identity}/health", timeout_s=1.0, headers=self.admin_headers()
            )
        except OSError:
            return None
        if status not in (200, 503):
            return None
        try:
            found: dict[str, Any] = json.loads(body)
        except ValueError:
            return None
        return status, found

    def admin_headers(self) -> dict[str, str]:
        """Basic auth of the admin, unless the test configured it by hash only (then none: a
        wrong guess would count against 127.0.0.1's failed-login budget)."""
        if "auth_admin_password_hash" in self.settings:
            return {}
        user = self.settings.get("auth_admin_username", "root")
        password = self.settings.get("auth_admin_password", "root")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def is_leader(self) -> bool:
        h = self.health()
        return h is not None and h["role"] == "leader"

    def metrics(self) -> dict[str, float]:
        _, _, body = http_get(f"http://{self.identity}/metrics")
        out: dict[str, float] = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to its group if it has not exited within 15 s."""
        if self.proc is not None:
            children.stop(self.proc, signal.SIGTERM, 15)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
