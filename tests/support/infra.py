"""A whole system on a ZooKeeper ensemble whose members and links a test can break.

- `ZkLink`: one replica's way to the ensemble, a `TcpProxy` in front of each member; `cut()`
  partitions that replica from ZooKeeper (every member at once) while its HTTP and its Mesos
  connection stay up.
- `infra_system`: a ZooKeeper ensemble (3 servers by default), the Mesos stand-in with 3 agents,
  and replica processes each behind a `ZkLink`, with a leader connected to Mesos.
- `on_time_after`: when the jobs fired on time again after a fault, read from the runs.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble, ZooKeeperServer
from scheduler.storage.registry import Registry
from tests.e2e.pipeline_support import Runs, System
from tests.support.mesosfw import StandIn
from tests.support.replicas import ReplicaProcess
from tests.support.run_checks import (
    JobOutcome,
    counting_from,
    recorded,
    recorded_after,
    settle_and_check,
)
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

SESSION_S = 4.0  # the replicas' zk_session_timeout_seconds (ReplicaProcess's default)


class ZkLink:
    """A replica's connection string through a proxy per ensemble member, cut all together."""

    def __init__(self, ensemble: ZooKeeperEnsemble) -> None:
        self.proxies = [TcpProxy("127.0.0.1", s.client_port) for s in ensemble.servers]
        self.servers = list(ensemble.servers)

    @property
    def hosts(self) -> str:
        return ",".join(p.address for p in self.proxies)

    def connected_to(self) -> ZooKeeperServer | None:
        """The member the replica's session is connected to now, if any."""
        for proxy, server in zip(self.proxies, self.servers, strict=True):
            if proxy.connections():
                return server
        return None

    def cut(self) -> None:
        for proxy in self.proxies:
            proxy.cut()

    def restore(self) -> None:
        for proxy in self.proxies:
            proxy.restore()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


@dataclass
class Infra:
    """The system (`System`: the stand-in, the replicas, the API) and the ensemble under it."""

    ensemble: ZooKeeperEnsemble
    system: System
    namespace: str
    tmp: Path
    settings: dict[str, Any] = field(default_factory=dict)
    links: dict[str, ZkLink] = field(default_factory=dict)  # replica identity -> its link
    client: KazooClient | None = None

    def start_replica(self, **extra: Any) -> ReplicaProcess:
        """A replica behind a new `ZkLink` (stopped with the system)."""
        link = ZkLink(self.ensemble)
        replica = ReplicaProcess(
            link.hosts,
            self.tmp,
            zk_namespace=self.namespace,
            mesos_url=self.system.mesos.address,
            framework_failover_timeout_seconds=300,
            **{**self.settings, **extra},
        )
        self.links[replica.identity] = link
        self.system.replicas.append(replica.start())
        return replica

    def link(self, replica: ReplicaProcess) -> ZkLink:
        return self.links[replica.identity]

    def registry(self) -> Registry:
        """A registry over the test's own client, straight to the ensemble (no proxy)."""
        if self.client is None:
            self.client = KazooClient(hosts=self.ensemble.hosts, timeout=10)
            self.client.start(timeout=30)
        return Registry(self.client, self.namespace)

    def acting_leader(self) -> ReplicaProcess | None:
        """The one replica acting as leader and connected to Mesos, or None."""
        leader = self.system.leader()
        if leader is None or (leader.health() or {}).get("mesos") != "connected":
            return None
        return leader

    def wait_leader(self, timeout_s: float = 40.0, other_than: str | None = None) -> ReplicaProcess:
        def found() -> ReplicaProcess | None:
            leader = self.acting_leader()
            return None if leader is None or leader.identity == other_than else leader

        return wait_for(found, timeout_s, message="one acting leader connected to Mesos")

    def leaders(self) -> list[ReplicaProcess]:
        """Every live replica that says it leads and acts (should be at most one)."""
        return [r for r in self.system.replicas if r.alive() and r.is_leader()]


@contextmanager
def infra_system(
    tmp_path: Path,
    replicas: int = 2,
    agents: int = 3,
    zk_servers: int = 3,
    first: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[Infra]:
    """A ZooKeeper ensemble, the stand-in with `agents` agents and `replicas` replica processes
    (each behind its own `ZkLink`, with `settings`); yields once one leads, connected to Mesos,
    and every replica knows it. Everything is stopped on exit.

    With `first` (extra arguments of `Infra.start_replica`), the first replica is started with
    them and leads before the others start."""
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", size=zk_servers)
    links: list[ZkLink] = []
    mesos: StandIn | None = None
    infra: Infra | None = None
    try:
        ensemble.start()
        ensemble.wait_quorum()
        mesos = StandIn(
            tmp_path / "mesos", "--agents", str(agents), "--allocation-interval-seconds", "0.5"
        ).start()
        infra = Infra(
            ensemble, System(tmp_path, mesos), f"t-{uuid.uuid4().hex[:12]}", tmp_path, settings
        )
        if first is not None:
            infra.start_replica(**first)
            infra.wait_leader()
        for _ in range(replicas - (first is not None)):
            infra.start_replica()
        leader = infra.wait_leader()
        wait_for(
            lambda: all(
                (r.health() or {}).get("leader") == leader.identity for r in infra.system.replicas
            ),
            20,
            message="every replica serving and knowing the leader",
        )
        yield infra
    finally:
        if infra is not None:
            for replica in infra.system.replicas:
                replica.stop()
            links = list(infra.links.values())
            if infra.client is not None:
                infra.client.stop()
                infra.client.close()
        if mesos is not None:
            mesos.stop()
        for link in links:
            link.close()
        ensemble.stop()


def fire_before(t: float, period_s: float = 2.0) -> float:
    """The cron fire at or before `t` of a job firing every `period_s` seconds on the minute."""
    return math.floor(t / period_s) * period_s


def on_time_after(
    starts: Sequence[Sequence[float]],
    after: float,
    on_time_s: float = 1.0,
    period_s: float = 2.0,
    in_a_row: int = 2,
) -> float | None:
    """The first cron fire after `after` from which every shard (`starts[item]`: its run
    starts) started within `on_time_s` of each of `in_a_row` fires in a row, or None.

    For a misfire-off job, whose missed fires are skipped, not caught up, so that a late run
    cannot pass for an on-time one.
    """
    fire = fire_before(after, period_s) + period_s
    last_start = max((max(s) for s in starts if s), default=0.0)
    while fire <= last_start:
        if all(
            all(any(f <= t < f + on_time_s for t in shard) for shard in starts)
            for f in (fire + k * period_s for k in range(in_a_row))
        ):
            return fire
        fire += period_s
    return None


CRON = "0/2 * * * * ?"
JOBS = {"on": True, "off": False}  # name -> misfire
SHARDS = 2


@dataclass
class Workload:
    """Jobs of the record script firing every 2 s, failover on: each one's runs and the moment
    its fires are counted from."""

    jobs: dict[str, bool]
    runs: dict[str, Runs]
    first: dict[str, float]

    def starts(self, job: str) -> list[list[float]]:
        return [self.runs[job].starts(item) for item in range(SHARDS)]


def start_workload(infra: Infra, jobs: dict[str, bool] | None = None) -> Workload:
    """Register an app and a job per entry of `jobs` (name -> misfire; default `JOBS`), wait for
    each one's first record and first runs."""
    jobs = dict(JOBS if jobs is None else jobs)
    system = infra.system
    registry = infra.registry()
    runs = {name: Runs(Path(system.make_app(f"app_{name}"))) for name in jobs}
    for name, misfire in jobs.items():
        system.script_job(
            name, CRON, shards=SHARDS, app=f"app_{name}", misfire=misfire, failover=True
        )
    first = {
        name: counting_from(
            wait_for(partial(recorded, registry, name), 20, message=f"{name}'s first record")
        )
        for name in jobs
    }
    wait_for(
        lambda: all(len(r.ends(ok=True)) >= SHARDS for r in runs.values()),
        30,
        message="every job ran",
    )
    return Workload(jobs, runs, first)


def check_workload(infra: Infra, load: Workload, timeout_s: float = 60.0) -> list[JobOutcome]:
    """`settle_and_check` on the workload, with one acting leader."""
    return settle_and_check(
        infra.system,
        infra.registry(),
        CRON,
        load.jobs,
        load.runs,
        load.first,
        SHARDS,
        timeout_s=timeout_s,
        also_settled=lambda: infra.acting_leader() is not None,
    )


def fires_go_on(infra: Infra, job: str = "on", fires: int = 3, timeout_s: float = 30.0) -> None:
    """Wait until `fires` more fires of `job` are recorded."""
    registry = infra.registry()
    mark = recorded(registry, job) or 0.0
    wait_for(
        partial(recorded_after, registry, job, mark + 2 * fires),
        timeout_s,
        message=f"{fires} more fires of {job}",
    )
