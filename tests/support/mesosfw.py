"""Drive the local Mesos stand-in from tests and benchmarks with real pymesos drivers.

- `StandIn`: `python -m deploy.localmesos --port 0 ...` as a child process.
- `RecordingScheduler` + `Framework`: an in-process `MesosSchedulerDriver` that records every
  callback and launches queued tasks on the next offer that fits.
- TaskInfo/ExecutorInfo builders and `FIXTURE_EXECUTOR` (a real pymesos executor script).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymesos import MesosSchedulerDriver, Scheduler

from deploy import children
from tests.support.waiting import wait_for

__all__ = [
    "FIXTURE_EXECUTOR",
    "Framework",
    "RawSubscription",
    "RecordingScheduler",
    "StandIn",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_EXECUTOR = ROOT / "tests" / "integration" / "localmesos" / "fixture_executor.py"
Json = dict[str, Any]


class StandIn:
    """The stand-in as a child process; `address` is what it printed.

    It runs in a process group of its own and dies with the thread that started it; its
    executors die with it.
    """

    def __init__(self, work_dir: Path, *extra_args: str) -> None:
        self.work_dir = work_dir
        self.log_path = work_dir / "localmesos.log"
        self._args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self, timeout_s: float = 20.0) -> StandIn:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = children.start(
                [
                    sys.executable,
                    "-m",
                    "deploy.localmesos",
                    "--port",
                    "0",
                    "--work-dir",
                    str(self.work_dir / "mesos"),
                    *self._args,
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("localmesos listening on "):
            self.stop()
            raise AssertionError(f"stand-in did not start: {line!r}\n{self.log_tail()}")
        self.address = line.rsplit(" ", 1)[1]
        return self

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL to its group if it does not exit in time; returns the exit
        code."""
        process = self.process
        if process is None:
            return None
        children.stop(process, signal.SIGTERM, timeout_s)
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        address: str | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        host, port = (address or self.address).split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            all_headers = dict(headers or {})
            if data is not None and "Content-Type" not in all_headers:
                all_headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=all_headers)
            response = conn.getresponse()
            return response.status, response.read(), dict(response.getheaders())
        finally:
            conn.close()

    def get_json(self, path: str, address: str | None = None) -> Any:
        status, body, _ = self.request("GET", path, address=address)
        assert status == 200, (status, body)
        return json.loads(body)

    def post_json(self, path: str, body: Any) -> tuple[int, Any]:
        status, raw, _ = self.request("POST", path, body)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode()

    def state(self) -> Json:
        return dict(self.get_json("/master/state"))

    def agent_endpoint(self, index: int = 0) -> str:
        """`127.0.0.1:PORT` of an agent, from its pid in /master/state."""
        return str(self.state()["slaves"][index]["pid"]).split("@", 1)[1]

    def framework_state(self, framework_id: str) -> Json | None:
        state = self.state()
        for framework in state["frameworks"] + state["completed_frameworks"]:
            if framework["id"] == framework_id:
                return dict(framework)
        return None

    def sandboxes(self, framework_id: str | None = None) -> dict[str, Path]:
        """Executor id -> sandbox directory, from every agent's own `/state` (as on real Mesos,
        the master's state does not show sandboxes); live executors win over completed ones."""
        found: dict[str, Path] = {}
        for agent in self.state()["slaves"]:
            agent_state = self.get_json("/state", str(agent["pid"]).split("@", 1)[1])
            for framework in agent_state["frameworks"] + agent_state["completed_frameworks"]:
                if framework_id is not None and framework["id"] != framework_id:
                    continue
                for executor in framework["completed_executors"] + framework["executors"]:
                    found[executor["id"]] = Path(executor["directory"])
        return found


@dataclass
class Update:
    task_id: str
    state: str
    status: Json


@dataclass
class RecordingScheduler(Scheduler):  # type: ignore[misc]
    """Records callbacks; launches `queue`d tasks on offers that fit, declines the rest."""

    refuse_s: float = 0.2
    hold_offers: bool = False  # keep offers (never decline)
    cond: threading.Condition = field(default_factory=threading.Condition)
    framework_ids: list[str] = field(default_factory=list)
    reregistrations: int = 0
    disconnections: int = 0
    offers: list[Json] = field(default_factory=list)
    offer_times: list[float] = field(default_factory=list)  # time.monotonic() of each offer
    updates: list[Update] = field(default_factory=list)
    rescinded: list[str] = field(default_factory=list)
    failures: list[tuple[str | None, str, int | None]] = field(default_factory=list)
    messages: list[bytes] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    queue: list[Json] = field(default_factory=list)

    def launch(self, *tasks: Json) -> None:
        """Queue TaskInfos (without agent_id); they go out on the next offer that fits."""
        with self.cond:
            self.queue.extend(tasks)

    def registered(self, driver: Any, framework_id: Json, master_info: Json) -> None:
        self._record(lambda: self.framework_ids.append(framework_id["value"]))

    def reregistered(self, driver: Any, master_info: Json) -> None:
        def bump() -> None:
            self.reregistrations += 1

        self._record(bump)

    def disconnected(self, driver: Any) -> None:
        def bump() -> None:
            self.disconnections += 1

        self._record(bump)

    def resourceOffers(self, driver: Any, offers: list[Json]) -> None:
        for offer in offers:
            with self.cond:
                self.offers.append(offer)
                self.offer_times.append(time.monotonic())
                tasks, self.queue = self.queue, []
                self.cond.notify_all()
            if tasks:
                for task in tasks:
                    task.setdefault("agent_id", offer["agent_id"])
                driver.launchTasks(offer["id"], tasks, {"refuse_seconds": self.refuse_s})
            elif not self.hold_offers:
                driver.declineOffer(offer["id"], {"refuse_seconds": self.refuse_s})

    def offerRescinded(self, driver: Any, offer_id: Json) -> None:
        self._record(lambda: self.rescinded.append(offer_id["value"]))

    def statusUpdate(self, driver: Any, status: Json) -> None:
        update = Update(status["task_id"]["value"], status["state"], dict(status))
        self._record(lambda: self.updates.append(update))

    def frameworkMessage(self, driver: Any, executor_id: Json, agent_id: Json, data: str) -> None:
        self._record(lambda: self.messages.append(base64.b64decode(data)))

    def slaveLost(self, driver: Any, agent_id: Json) -> None:
        self._record(lambda: self.failures.append((None, agent_id["value"], None)))

    def executorLost(self, driver: Any, executor_id: Json, agent_id: Json, status: int) -> None:
        failure = (executor_id["value"], agent_id["value"], status)
        self._record(lambda: self.failures.append(failure))

    def error(self, driver: Any, message: str) -> None:
        self._record(lambda: self.errors.append(message))

    def _record(self, change: Callable[[], None]) -> None:
        with self.cond:
            change()
            self.cond.notify_all()

    def states(self, task_id: str) -> list[str]:
        with self.cond:
            return [u.state for u in self.updates if u.task_id == task_id]

    def last(self, task_id: str) -> Update | None:
        with self.cond:
            found = [u for u in self.updates if u.task_id == task_id]
        return found[-1] if found else None

    def wait_state(self, task_id: str, state: str, timeout_s: float = 20.0) -> Update:
        def seen() -> Update | None:
            with self.cond:
                for u in self.updates:
                    if u.task_id == task_id and u.state == state:
                        return u
            return None

        return wait_for(seen, timeout_s, message=f"{task_id} reaching {state}")


class Framework:
    """An in-process pymesos scheduler driver around a RecordingScheduler."""

    def __init__(
        self,
        address: str,
        scheduler: RecordingScheduler | None = None,
        **framework_info: Any,
    ) -> None:
        self.scheduler = scheduler or RecordingScheduler()
        principal = framework_info.pop("principal", None)
        secret = framework_info.pop("secret", None)
        implicit_acks = framework_info.pop("implicit_acknowledgements", True)
        info = {"user": "tester", "name": "localmesos-test", **framework_info}
        self.driver = MesosSchedulerDriver(
            self.scheduler,
            info,
            address,
            implicit_acknowledgements=implicit_acks,
            principal=principal,
            secret=secret,
        )
        self._running = False
        self._id: str | None = None

    @property
    def id(self) -> str:
        """The framework id of the first registration (pymesos forgets it on TEARDOWN)."""
        assert self._id is not None, "not registered yet"
        return self._id

    def start(self, timeout_s: float = 10.0) -> Framework:
        self.driver.start()
        self._running = True
        self._id = wait_for(
            lambda: self.driver.connected and self.driver.framework_id,
            timeout_s,
            message="framework subscription",
        )
        return self

    def stop(self, failover: bool = False) -> None:
        """Stop the driver; without failover pymesos sends TEARDOWN first."""
        if self._running:
            self._running = False
            detector = self.driver.detector
            self.driver.stop(failover=failover)
            self.driver.join()
            if detector is not None:
                detector.zk.close()  # pymesos only stop()s its KazooClient, leaking sockets


def scalar(name: str, value: float) -> Json:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def command_task(
    task_id: str, command: str, cpus: float = 0.1, mem: float = 32, **extra: Any
) -> Json:
    return {
        "task_id": {"value": task_id},
        "name": task_id,
        "resources": [scalar("cpus", cpus), scalar("mem", mem)],
        "command": {"value": command, "shell": True},
        **extra,
    }


def executor_info(
    executor_id: str,
    command: str | None = None,
    uris: Sequence[Json] = (),
    cpus: float = 0.1,
    mem: float = 32,
) -> Json:
    return {
        "executor_id": {"value": executor_id},
        "name": executor_id,
        "command": {
            "value": command or f"{sys.executable} {FIXTURE_EXECUTOR}",
            "shell": True,
            "uris": list(uris),
        },
        "resources": [scalar("cpus", cpus), scalar("mem", mem)],
    }


def executor_task(
    task_id: str, executor: Json, cpus: float = 0.1, mem: float = 32, **spec: Any
) -> Json:
    data = base64.b64encode(json.dumps(spec or {"mode": "finish"}).encode()).decode()
    return {
        "task_id": {"value": task_id},
        "name": task_id,
        "resources": [scalar("cpus", cpus), scalar("mem", mem)],
        "executor": executor,
        "data": data,
    }


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout_s: float = 10.0) -> None:
    wait_for(lambda: not process_alive(pid), timeout_s, message=f"pid {pid} to exit")


class RawSubscription:
    """A SUBSCRIBE made by hand, reading RecordIO events off the chunked response."""

    def __init__(self, address: str, call: Json, headers: dict[str, str] | None = None) -> None:
        host, port = address.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=10)
        all_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        all_headers.update(headers or {})
        self.conn.request("POST", "/api/v1/scheduler", json.dumps(call).encode(), all_headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.headers = dict(self.response.getheaders())
        self.stream_id = self.response.getheader("Mesos-Stream-Id")

    def next_event(self) -> Json:
        """The next record; raises EOFError at the end of the stream."""
        digits = b""
        while not digits.endswith(b"\n"):
            byte = self.response.read(1)
            if not byte:
                raise EOFError("stream ended")
            digits += byte
        assert b"\r" not in digits, "RecordIO must not carry CR"
        payload = self.response.read(int(digits))
        return dict(json.loads(payload))

    def next_of(self, kind: str, limit: int = 50) -> Json:
        """Skip events until one of type `kind`."""
        for _ in range(limit):
            event = self.next_event()
            if event["type"] == kind:
                return event
        raise AssertionError(f"no {kind} event in {limit} events")

    def call(self, body: Json, stream_id: str | None = None) -> tuple[int, bytes, dict[str, str]]:
        """A call over a fresh connection with this subscription's stream id."""
        host, port = self.conn.host, self.conn.port
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            headers = {"Content-Type": "application/json"}
            sid = self.stream_id if stream_id is None else stream_id
            if sid:
                headers["Mesos-Stream-Id"] = sid
            conn.request("POST", "/api/v1/scheduler", json.dumps(body).encode(), headers)
            response = conn.getresponse()
            return response.status, response.read(), dict(response.getheaders())
        finally:
            conn.close()

    def close(self) -> None:
        self.response.close()
        self.conn.close()
