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
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from deploy.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, free_port
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
from tests.support.skewed_clock import ENV as CLOCK_ENV
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

    def cut(self, silent: bool = False) -> None:
        """Partition the replica from every member: its connection dropped (`silent`: left open
        and forwarding nothing, so that only its own timeouts tell it), new ones held."""
        for proxy in self.proxies:
            proxy.cut(silent)

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
    # Replicas run under `skewed_clock`: identity -> the file of its clock's offset.
    clock_files: dict[str, Path] = field(default_factory=dict)
    skewed: bool = False  # start every replica under `skewed_clock`
    watched: str = "on"  # the job whose records say fires go on (`fires_go_on`)
    client: KazooClient | None = None

    def start_replica(self, **extra: Any) -> ReplicaProcess:
        """A replica behind a new `ZkLink` (stopped with the system)."""
        link = ZkLink(self.ensemble)
        port = free_port()
        clock = self.tmp / f"clock-{port}"
        if self.skewed and "module" not in extra:
            clock.write_text("0")
            extra = {**extra, "module": "tests.support.skewed_clock"}
            extra["env"] = {**extra.get("env", {}), CLOCK_ENV: str(clock)}
        replica = ReplicaProcess(
            link.hosts,
            self.tmp,
            zk_namespace=self.namespace,
            mesos_url=self.system.mesos.address,
            framework_failover_timeout_seconds=300,
            http_port=port,
            **{**self.settings, **extra},
        )
        self.links[replica.identity] = link
        if CLOCK_ENV in (extra.get("env") or {}):
            self.clock_files[replica.identity] = Path(extra["env"][CLOCK_ENV])
        self.system.replicas.append(replica.start())
        return replica

    def link(self, replica: ReplicaProcess) -> ZkLink:
        return self.links[replica.identity]

    def registry(self) -> Registry:
        """A registry over the test's own client, straight to the ensemble (no proxy).

        The client is the test's eyes, not part of the system under test: its session lasts the
        longest the ensemble allows (30 s), so it outlives the faults a test injects (a quorum
        lost for the replicas' session timeout and more, on a loaded machine); with 10 s it
        expired in a quorum loss and the test's next read failed, though the system was right.
        It reconnects as the replicas do, at least every second: with kazoo's default (the pause
        doubling up to 60 s) its first read was answered 15.6 s after a quorum lost for 13 s was
        back (measured), and a CI run's next read waited out its 10-s deadline.
        """
        if self.client is None:
            self.client = KazooClient(
                hosts=self.ensemble.hosts,
                timeout=30,
                connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            )
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
    skewed: bool = False,
    **settings: Any,
) -> Iterator[Infra]:
    """A ZooKeeper ensemble, the stand-in with `agents` agents and `replicas` replica processes
    (each behind its own `ZkLink`, with `settings`); yields once one leads, connected to Mesos,
    and every replica knows it. Everything is stopped on exit.

    With `first` (extra arguments of `Infra.start_replica`), the first replica is started with
    them and leads before the others start. With `skewed`, every replica runs under
    `tests.support.skewed_clock` (`Infra.clock_files`)."""
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", size=zk_servers, quick_start=True)
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
            ensemble,
            System(tmp_path, mesos),
            f"t-{uuid.uuid4().hex[:12]}",
            tmp_path,
            settings,
            skewed=skewed,
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
    infra.watched = next(iter(jobs))
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


def fires_go_on(
    infra: Infra, job: str | None = None, fires: int = 3, timeout_s: float = 30.0
) -> None:
    """Wait until `fires` more fires of `job` (default: the workload's first) are recorded."""
    job = job or infra.watched
    registry = infra.registry()
    mark = recorded(registry, job) or 0.0
    wait_for(
        partial(recorded_after, registry, job, mark + 2 * fires),
        timeout_s,
        message=f"{fires} more fires of {job}",
    )


# -- faults, one turn each: shared by the infrastructure chaos test and the faults benchmark ----


@dataclass
class FaultTurn:
    """One fault done: what, when it began and when it was healed (wall clock), and the leader
    acting after it."""

    name: str
    at: float
    healed_at: float
    leader: str


def kill_follower(infra: Infra) -> FaultTurn:
    """SIGKILL the ZooKeeper follower the leader's session is on (else any follower), let the
    fires go on without it, then start it again."""
    leader = infra.wait_leader()
    on = infra.link(leader).connected_to()
    follower = on if on is not None and on.mode() == "follower" else infra.ensemble.followers()[0]
    at = time.time()
    follower.kill()
    fires_go_on(infra, fires=2)
    follower.start()
    infra.ensemble.wait_quorum()
    return FaultTurn("ZooKeeper follower SIGKILLed", at, at, infra.wait_leader().identity)


def kill_zk_leader(infra: Infra) -> FaultTurn:
    """SIGKILL the ensemble's leader (the others elect a new one), then start it again."""
    zk_leader = infra.ensemble.wait_quorum()
    at = time.time()
    zk_leader.kill()
    wait_for(infra.ensemble.leader, 30, message="a new ZooKeeper leader")
    healed = time.time()
    fires_go_on(infra, fires=2)
    zk_leader.start()
    infra.ensemble.wait_quorum()
    return FaultTurn("ZooKeeper leader SIGKILLed", at, healed, infra.wait_leader().identity)


def lose_quorum(infra: Infra, hold_s: float = SESSION_S + 3) -> FaultTurn:
    """SIGKILL two of three members (the leader and a follower) for `hold_s`, asserting that no
    replica acts meanwhile; then start them again."""
    zk_leader = infra.ensemble.wait_quorum()
    down = [zk_leader, infra.ensemble.followers()[0]]
    at = time.time()
    for server in down:
        server.kill()
    wait_for(lambda: not infra.leaders(), 3, message="no replica acting without a quorum")
    until = time.monotonic() + hold_s
    while time.monotonic() < until:
        assert not infra.leaders(), "a replica acts without a ZooKeeper quorum"
        time.sleep(0.2)
    for server in down:
        server.start(wait=False)
    infra.ensemble.wait_quorum()
    healed = time.time()  # the quorum is back
    return FaultTurn("quorum lost", at, healed, infra.wait_leader(timeout_s=60).identity)


def cut_leader(infra: Infra, hold_s: float = SESSION_S + 3, silent: bool = True) -> FaultTurn:
    """Cut the leading replica off from every ZooKeeper member (its HTTP and Mesos connection
    stay up; `silent`: packets dropped, see `ZkLink.cut`) for `hold_s` or until another replica
    leads, whichever is later; then restore."""
    old = infra.wait_leader()
    at = time.time()
    infra.link(old).cut(silent)
    # A silent cut is noticed by kazoo's read timeout, two thirds of the session timeout.
    wait_for(lambda: not old.is_leader(), SESSION_S, message="the cut-off leader stops acting")
    new = infra.wait_leader(timeout_s=SESSION_S + 20, other_than=old.identity)
    time.sleep(max(0.0, at + hold_s - time.time()))  # the partition lasts hold_s
    healed = time.time()
    infra.link(old).restore()
    wait_for(
        lambda: (old.health() or {}).get("leader") == new.identity,
        30,
        message="the old leader rejoins as a standby",
    )
    how = "silently" if silent else "connections dropped"
    return FaultTurn(f"leader cut off from ZooKeeper ({how})", at, healed, new.identity)


def jump_clock(infra: Infra, seconds: float) -> FaultTurn:
    """Step the acting leader's wall clock by `seconds` (it must run under `skewed_clock`), let
    three fires be recorded, then step it back. Use an odd number of seconds with a cron every
    2 s: a fire shifted by an even number would start on an even second and pass for on time in
    `on_time_after`."""
    leader = infra.wait_leader()
    offset = infra.clock_files[leader.identity]
    at = time.time()
    offset.write_text(f"{seconds:g}")
    fires_go_on(infra, fires=3, timeout_s=30 + max(0.0, -seconds))
    healed = time.time()
    offset.write_text("0")
    return FaultTurn(
        f"leader's wall clock {seconds:+g} s", at, healed, infra.wait_leader().identity
    )


def next_on_time_launch(load: Workload, after: float, timeout_s: float = 60.0) -> float:
    """When every misfire-off job of `load` launched on time again after `after` (wall clock):
    the first start of the first fire from which they all ran on time twice in a row."""
    offs = [job for job, misfire in load.jobs.items() if not misfire]

    def found() -> float | None:
        fires = [on_time_after(load.starts(job), after) for job in offs]
        if None in fires:
            return None
        fire = max(f for f in fires if f is not None)
        starts = [t for job in offs for shard in load.starts(job) for t in shard]
        return min(t for t in starts if fire <= t)

    return wait_for(found, timeout_s, interval_s=0.2, message="an on-time launch")


def fail_over_master(infra: Infra, reregister_delay_s: float = 1.0) -> FaultTurn:
    """The stand-in's Mesos master fails over (a new master id, subscriptions closed, offers
    void, agents re-registering with their tasks after `reregister_delay_s`); healed once the
    leader is connected to the new master."""
    infra.wait_leader()
    at = time.time()
    status, answer = infra.system.mesos.post_json(
        "/faults/master_failover", {"agent_reregister_delay_s": reregister_delay_s}
    )
    assert status == 200, answer
    leader = infra.wait_leader(timeout_s=30)
    return FaultTurn("Mesos master failover", at, time.time(), leader.identity)
