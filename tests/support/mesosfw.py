"""Drive the local Mesos stand-in from tests and benchmarks with real pymesos drivers.

- `StandIn`: `python -m deploy.localmesos --port 0 ...` as a child process.
- `RecordingScheduler` + `Framework`: an in-process `MesosSchedulerDriver` that records every
  callback (status updates as `tests.support.updates.Update`) and launches queued tasks on the
  next offer: plain TaskInfos, or tasks of an ejcloud `App` run by its real executor.
- TaskInfo/ExecutorInfo builders and `FIXTURE_EXECUTOR` (a real pymesos executor script).
"""

from __future__ import annotations

import base64
import http.client
import json
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymesos import MesosSchedulerDriver, Scheduler

from deploy import children
from executor import taskdata
from executor.records import RecordError, decode_status_data
from executor.taskdata import TaskData
from tests.support.updates import Update, UpdateLog
from tests.support.waiting import wait_for

__all__ = [
    "FIXTURE_EXECUTOR",
    "App",
    "Framework",
    "RawSubscription",
    "RecordingScheduler",
    "StandIn",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_EXECUTOR = ROOT / "tests" / "integration" / "deploy" / "localmesos" / "fixture_executor.py"
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


@dataclass(frozen=True)
class App:
    """An ejcloud app as the scheduler registers it: an archive (appURL) and its bootstrap
    script. Its tasks run in one executor per agent, id `{app}@-@{agentId}`."""

    name: str
    archive: Path
    bootstrap_script: str = "bin/start.sh"
    environment: dict[str, str] = field(default_factory=dict)

    def executor_id(self, agent_id: str) -> str:
        return taskdata.executor_id(self.name, agent_id)

    def executor_info(self, agent_id: str) -> Json:
        info = taskdata.executor_info(
            app_name=self.name,
            agent_id=agent_id,
            app_url=self.archive.as_uri(),
            bootstrap_script=self.bootstrap_script,
            cpus=0.1,
            mem_mb=64,
            cache=False,
        )
        info["command"]["environment"] = {
            "variables": [{"name": k, "value": v} for k, v in sorted(self.environment.items())]
        }
        return info


# Builds a queued task's TaskInfo for the offer it goes out on.
_TaskFor = Callable[[Json], Json]


def _on_offered_agent(task: Json) -> _TaskFor:
    """`task` on the agent of the offer it goes out on, unless it names an agent itself."""
    return lambda offer: {"agent_id": offer["agent_id"], **task}


class RecordingScheduler(UpdateLog, Scheduler):  # type: ignore[misc]  # pymesos is untyped
    """Records every callback; launches queued tasks on the next offer, declines the others.

    Every record is guarded by `cond` (notified on each change). Declined offers are filtered
    for `refuse_s`; with `revive_on_launch`, queuing a task revives offers, so a long
    `refuse_s` keeps an idle framework quiet without delaying launches. With `hold_offers`,
    offers without a task to launch are kept instead of declined.
    """

    def __init__(
        self, refuse_s: float = 0.2, hold_offers: bool = False, revive_on_launch: bool = False
    ) -> None:
        super().__init__()
        self.refuse_s = refuse_s
        self.hold_offers = hold_offers
        self.revive_on_launch = revive_on_launch
        self.framework_ids: list[str] = []
        self.reregistrations = 0
        self.disconnections = 0
        self.offers: list[Json] = []
        self.offer_times: list[float] = []  # time.monotonic() of each offer
        self.agent_ids: set[str] = set()  # of every offer
        self.rescinded: list[str] = []
        self.failures: list[tuple[str | None, str, int | None]] = []  # executor, agent, status
        self.messages: list[bytes] = []
        self.errors: list[str] = []
        self._queue: list[_TaskFor] = []
        self._driver: Any = None  # the driver of the callbacks, once subscribed

    # -- queuing tasks (test thread) -----------------------------------------------------------

    def launch(self, *tasks: Json) -> None:
        """Queue TaskInfos (without agent_id); they go out on the next offer."""
        self._enqueue([_on_offered_agent(task) for task in tasks])

    def launch_app(self, app: App, data: TaskData | str, task_id: str | None = None) -> str:
        """Queue a task of `app` whose TaskInfo.data is `data` (TaskData, or raw text); it goes
        out on the next offer with the app's ExecutorInfo for that agent. Returns its id."""
        if isinstance(data, TaskData):
            task_id = task_id or data.sharding.task_id
            raw = data.encode()
        else:
            task_id = task_id or f"raw@-@0@-@READY@-@S@-@{uuid.uuid4()}"
            raw = data
        template = {
            "name": task_id,
            "task_id": {"value": task_id},
            "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
            "data": raw,
        }

        def task_for(offer: Json) -> Json:
            agent_id = offer["agent_id"]
            return {
                **template,
                "agent_id": agent_id,
                "executor": app.executor_info(agent_id["value"]),
            }

        self._enqueue([task_for])
        return task_id

    def _enqueue(self, tasks: list[_TaskFor]) -> None:
        # Queued and revived under the lock that offers are answered under: no offer can be
        # declined (and filtered) between the two with a task left in the queue.
        with self.cond:
            self._queue.extend(tasks)
            if self.revive_on_launch and self._driver is not None:
                self._driver.reviveOffers()

    def lost_executors(self) -> list[tuple[str, int | None]]:
        """(executor id, exit status) of each executor Mesos reported gone, in order."""
        with self.cond:
            return [(e, status) for e, _, status in self.failures if e is not None]

    # -- pymesos callbacks (the driver's thread) -----------------------------------------------

    def registered(self, driver: Any, framework_id: Json, master_info: Json) -> None:
        def note() -> None:
            self._driver = driver
            self.framework_ids.append(framework_id["value"])

        self._record(note)

    def reregistered(self, driver: Any, master_info: Json) -> None:
        def bump() -> None:
            self._driver = driver
            self.reregistrations += 1

        self._record(bump)

    def disconnected(self, driver: Any) -> None:
        def bump() -> None:
            self.disconnections += 1

        self._record(bump)

    def resourceOffers(self, driver: Any, offers: list[Json]) -> None:
        for offer in offers:
            # Taken and answered under the lock (see _enqueue).
            with self.cond:
                self.offers.append(offer)
                self.offer_times.append(time.monotonic())
                self.agent_ids.add(offer["agent_id"]["value"])
                queued, self._queue = self._queue, []
                self.cond.notify_all()
                if queued:
                    tasks = [task_for(offer) for task_for in queued]
                    driver.launchTasks(offer["id"], tasks, {"refuse_seconds": self.refuse_s})
                elif not self.hold_offers:
                    driver.declineOffer(offer["id"], {"refuse_seconds": self.refuse_s})

    def offerRescinded(self, driver: Any, offer_id: Json) -> None:
        self._record(lambda: self.rescinded.append(offer_id["value"]))

    def statusUpdate(self, driver: Any, status: Json) -> None:
        try:
            record = decode_status_data(status.get("data"))
        except RecordError:  # data that is no execution record (a fixture executor's, say)
            record = None
        self.add(
            Update(
                task_id=status["task_id"]["value"],
                state=status["state"],
                message=status.get("message", ""),
                record=record,
                reason=status.get("reason", ""),
                source=status.get("source", ""),
                status=dict(status),
            )
        )

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

    def kill(self, task_id: str) -> None:
        self.driver.killTask({"value": task_id})

    def send_message(self, executor_id: str, agent_id: str, text: str) -> None:
        """A framework message (UTF-8 `text`) to an executor."""
        data = base64.b64encode(text.encode()).decode()
        self.driver.sendFrameworkMessage({"value": executor_id}, {"value": agent_id}, data)

    def shutdown_executor(self, executor_id: str, agent_id: str) -> None:
        """The scheduler API's SHUTDOWN call, on the driver's own stream (pymesos has no method
        for it)."""
        self.driver._send(
            {
                "type": "SHUTDOWN",
                "framework_id": {"value": self.id},
                "shutdown": {
                    "executor_id": {"value": executor_id},
                    "agent_id": {"value": agent_id},
                },
            }
        )


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
