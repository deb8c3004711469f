"""A whole local system for pipeline tests: ZooKeeper (session fixture), the local Mesos
stand-in with two agents, and scheduler replica processes, plus a job script that records each
shard run in a file."""

from __future__ import annotations

import base64
import json
import signal
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.http import exchange
from tests.support.mesosfw import StandIn
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()

RECORD_SH = """#!/bin/sh
# $1 is the sharding context JSON. Appends "start <item> <epoch> <json>" / "end ..." lines.
out="{out}"
item="$EJC_SHARDING_ITEM"
echo "start $item $(date +%s.%N) $1" >> "$out"
if [ -n "$FAIL_ONCE_ITEM" ] && [ "$item" = "$FAIL_ONCE_ITEM" ] && [ ! -e "$out.failed-$item" ]; then
  touch "$out.failed-$item"; echo "end $item $(date +%s.%N) failed" >> "$out"; exit 3
fi
sleep "${{SLEEP_S:-0}}"
echo "end $item $(date +%s.%N) ok" >> "$out"
"""


@dataclass
class Runs:
    """Parsed lines of a record file."""

    path: Path

    def lines(self) -> list[list[str]]:
        if not self.path.exists():
            return []
        return [line.split(" ", 3) for line in self.path.read_text().splitlines() if line]

    def starts(self, item: int | None = None) -> list[float]:
        return [
            float(p[2])
            for p in self.lines()
            if p[0] == "start" and (item is None or p[1] == str(item))
        ]

    def ends(self, item: int | None = None, ok: bool | None = None) -> list[float]:
        return [
            float(p[2])
            for p in self.lines()
            if p[0] == "end"
            and (item is None or p[1] == str(item))
            and (ok is None or (p[3] == "ok") == ok)
        ]

    def intervals(self, item: int) -> list[tuple[float, float]]:
        starts, ends = self.starts(item), self.ends(item)
        return list(zip(starts, ends + [float("inf")] * (len(starts) - len(ends)), strict=False))


@dataclass
class System:
    tmp: Path
    mesos: StandIn
    replicas: list[ReplicaProcess] = field(default_factory=list)

    def leader(self) -> ReplicaProcess | None:
        found = [r for r in self.replicas if r.alive() and r.is_leader()]
        return found[0] if len(found) == 1 else None

    def api(
        self, method: str, path: str, body: Any = None, raw: str | None = None
    ) -> tuple[int, Any]:
        leader = self.leader()
        assert leader is not None, "no leader"
        data = (
            raw.encode()
            if raw is not None
            else (None if body is None else json.dumps(body).encode())
        )
        headers = {"Authorization": AUTH}
        if data is not None:
            # A raw job name goes as the original's clients send it (urllib would say form).
            headers["Content-Type"] = "application/json"
        answer = exchange(method, f"http://{leader.identity}{path}", data=data, headers=headers)
        return answer.status, answer.json()

    def make_app(
        self, name: str = "rec_app", script: str = RECORD_SH, file: str = "record.sh"
    ) -> str:
        """Register an app whose archive holds `file`, the shell `script` with `{out}` the
        record file it appends to; returns that file's path."""
        src = self.tmp / f"{name}-src"
        src.mkdir(exist_ok=True)
        out = self.tmp / f"{name}.runs"
        (src / file).write_text(script.format(out=out))
        archive = self.tmp / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(src / file, arcname=file)
        status, body = self.api(
            "POST",
            "/api/app",
            {
                "appName": name,
                "appURL": str(archive),
                "bootstrapScript": "true",
                "cpuCount": 0.1,
                "memoryMB": 32,
            },
        )
        assert status == 204, body
        return str(out)

    def script_job(
        self,
        name: str,
        cron: str,
        *,
        shards: int = 3,
        app: str = "rec_app",
        env: str = "",
        **extra: Any,
    ) -> dict[str, Any]:
        job = {
            "jobName": name,
            "appName": app,
            "jobType": "SCRIPT",
            "jobExecutionType": "TRANSIENT",
            "scriptCommandLine": f"{env} sh record.sh".strip(),
            "cron": cron,
            "shardingTotalCount": shards,
            "cpuCount": 0.1,
            "memoryMB": 16,
            **extra,
        }
        status, body = self.api("POST", "/api/job/register", job)
        assert status == 204, body
        return job

    def running(self) -> list[dict[str, Any]]:
        status, body = self.api("GET", "/api/job/tasks/running")
        assert status == 200
        return list(body)

    def master_state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.mesos.address}/master/state", timeout=5) as resp:
            state: dict[str, Any] = json.load(resp)
            return state


_START_S = 60.0  # for the system's first leader, and its connection to Mesos


@contextmanager
def running_system(
    zk_hosts: str, zk_namespace: str, tmp_path: Path, replicas: int = 2, **settings: Any
) -> Iterator[System]:
    """The stand-in with two agents and `replicas` replica processes (with `settings`), a leader
    connected to Mesos; everything is stopped on exit."""
    mesos = StandIn(
        tmp_path / "mesos", "--agents", "2", "--allocation-interval-seconds", "0.5"
    ).start()
    system = System(tmp_path, mesos)
    try:
        for _ in range(replicas):
            system.replicas.append(
                ReplicaProcess(
                    zk_hosts,
                    tmp_path,
                    zk_namespace=zk_namespace,
                    mesos_url=mesos.address,
                    framework_failover_timeout_seconds=300,
                    **settings,
                ).start()
            )
        # Set-up, not a measured behaviour: the first processes of a run start while every
        # worker starts its own (a 20-s wait timed out once with the 2 cores overloaded).
        leader = wait_for(system.leader, _START_S, message="a leader")
        wait_for(
            lambda: (leader.health() or {}).get("mesos") == "connected",
            _START_S,
            message="mesos connected",
        )
        # Every replica serving and knowing the leader (tests send requests to standbys too;
        # a standby still starting refused the connection once).
        wait_for(
            lambda: all(
                (r.health() or {}).get("leader") == leader.identity for r in system.replicas
            ),
            20,
            message="every replica serving and knowing the leader",
        )
        yield system
    finally:
        for replica in system.replicas:
            replica.stop()
        mesos.stop()


def now() -> float:
    return time.time()


# -- blows to the leader, for the chaos tests ------------------------------------------------------

LEADER_BLOWS = ("SIGKILL", "SIGTERM", "SIGSTOP")


def replacement(system: System, zk_hosts: str, zk_namespace: str) -> None:
    """Start a replica in place of one that died (stopped with the system)."""
    system.replicas.append(
        ReplicaProcess(
            zk_hosts,
            system.tmp,
            zk_namespace=zk_namespace,
            mesos_url=system.mesos.address,
            framework_failover_timeout_seconds=300,
        ).start()
    )


def new_leader(system: System, old: str) -> ReplicaProcess:
    """The leader that is not `old`, once it is connected to Mesos (waits up to 40 s)."""

    def found() -> ReplicaProcess | None:
        leader = system.leader()
        if leader is None or leader.identity == old:
            return None
        return leader if (leader.health() or {}).get("mesos") == "connected" else None

    return wait_for(found, 40, message="a new leader connected to Mesos")


def strike_leader(
    system: System, zk_hosts: str, zk_namespace: str, how: str, frozen_s: float
) -> ReplicaProcess:
    """Deal the current leader one blow and return the leader after it, connected to Mesos.

    `SIGKILL` and `SIGTERM` (which must exit 0) end the leader, and a replica takes its place;
    `SIGSTOP` freezes it until another replica leads and `frozen_s` have passed, then thaws it.
    """
    leader = wait_for(system.leader, 30, message="a leader")
    if how == "SIGKILL":
        leader.signal(signal.SIGKILL)
        leader.wait(10)
        replacement(system, zk_hosts, zk_namespace)
    elif how == "SIGTERM":
        leader.signal(signal.SIGTERM)
        assert leader.wait(20) == 0
        replacement(system, zk_hosts, zk_namespace)
    elif how == "SIGSTOP":
        stopped_at = time.monotonic()
        leader.signal(signal.SIGSTOP)
        try:
            new_leader(system, leader.identity)
            wait_for(
                lambda: time.monotonic() - stopped_at > frozen_s,
                frozen_s + 8,
                message="frozen past its session timeout",
            )
        finally:
            leader.signal(signal.SIGCONT)
    else:
        raise ValueError(f"unknown blow {how!r}; one of {', '.join(LEADER_BLOWS)}")
    return new_leader(system, leader.identity)
