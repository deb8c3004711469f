"""A pymesos framework as its own process, so a test can SIGKILL it and start it again.

    python fixture_framework.py MASTER EVENTS_FILE [--framework-id ID]
        [--failover-timeout S] [--launch TASK_JSON]...

Appends one JSON line per callback to EVENTS_FILE; launches the `--launch` TaskInfos (agent_id
filled in) on the first offer; implicitly acknowledges; asks for implicit reconciliation on
every (re)registration; runs until killed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from pymesos import MesosSchedulerDriver, Scheduler


class EventLog:
    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        with self._lock, open(self._path, "a") as out:
            out.write(json.dumps({"event": kind, **fields}) + "\n")
            out.flush()


class FixtureScheduler(Scheduler):  # type: ignore[misc]
    def __init__(self, events: EventLog, launch: list[dict[str, Any]]) -> None:
        self._events = events
        self._launch = launch

    def registered(self, driver: Any, framework_id: dict[str, str], master: Any) -> None:
        self._events.write("registered", framework_id=framework_id["value"])
        driver.reconcileTasks([])

    def reregistered(self, driver: Any, master: Any) -> None:
        self._events.write("reregistered", framework_id=driver.framework_id)
        driver.reconcileTasks([])

    def resourceOffers(self, driver: Any, offers: list[dict[str, Any]]) -> None:
        for offer in offers:
            tasks, self._launch = self._launch, []
            if tasks:
                for task in tasks:
                    task["agent_id"] = offer["agent_id"]
                driver.launchTasks(offer["id"], tasks)
            else:
                driver.declineOffer(offer["id"], {"refuse_seconds": 5})

    def statusUpdate(self, driver: Any, status: dict[str, Any]) -> None:
        self._events.write(
            "update",
            task_id=status["task_id"]["value"],
            state=status["state"],
            reason=status.get("reason"),
            has_uuid="uuid" in status,
        )

    def error(self, driver: Any, message: str) -> None:
        self._events.write("error", message=message)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("events")
    parser.add_argument("--framework-id")
    parser.add_argument("--failover-timeout", type=float, default=30.0)
    parser.add_argument("--launch", action="append", default=[])
    args = parser.parse_args()
    info: dict[str, Any] = {
        "user": "tester",
        "name": "fixture-framework",
        "failover_timeout": args.failover_timeout,
        "checkpoint": True,
    }
    if args.framework_id:
        info["id"] = {"value": args.framework_id}
    events = EventLog(args.events)
    scheduler = FixtureScheduler(events, [json.loads(t) for t in args.launch])
    driver = MesosSchedulerDriver(scheduler, info, args.master)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    driver.start()
    events.write("started")
    stop.wait()
    driver.stop(failover=True)  # leave the framework to fail over, as a restarted leader does
    driver.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
