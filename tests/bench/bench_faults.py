"""Recovery from infrastructure faults: a 3-server ZooKeeper ensemble, two replica processes
(each behind proxies that can cut it off from ZooKeeper, each under a wall clock that can be
stepped), the stand-in with three agents, and two jobs firing every 2 s (misfire on and off).

Faults: a ZooKeeper follower or the ensemble's leader SIGKILLed (and restarted), two of three
members down for 7 s, the leading replica cut off from ZooKeeper for 7 s (packets dropped), the
leader's wall clock stepped 9 s ahead or behind for three fires, a Mesos master failover.
For each fault, `--rounds` times: the time from the fault to the next on-time launch (every
shard of the misfire-off job started within 1 s of its fire, two fires in a row), and from the
fault's end (server restarted, quorum back, link restored, clock stepped back) to it. A job
firing every 2 s waits 1 s on average for its next fire, so about 1 s is the floor.
Run: `./dev.sh bench faults [--rounds N]`.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.support.infra import (
    SESSION_S,
    FaultTurn,
    Infra,
    check_workload,
    cut_leader,
    fail_over_master,
    fires_go_on,
    infra_system,
    jump_clock,
    kill_follower,
    kill_zk_leader,
    lose_quorum,
    next_on_time_launch,
    start_workload,
)

FAULTS: dict[str, Callable[[Infra], FaultTurn]] = {
    "follower": kill_follower,
    "zk-leader": kill_zk_leader,
    "quorum": lose_quorum,
    "partition": cut_leader,
    "clock+9": partial(jump_clock, seconds=9),
    "clock-9": partial(jump_clock, seconds=-9),
    "mesos-master": fail_over_master,
}


def run(rounds: int, chosen: list[str]) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in chosen}
    with (
        tempfile.TemporaryDirectory() as tmp,
        infra_system(Path(tmp), replicas=2, skewed=True) as infra,
    ):
        load = start_workload(infra)
        for name in chosen:
            for _ in range(rounds):
                done = FAULTS[name](infra)
                launched = next_on_time_launch(load, done.at, timeout_s=90)
                results[name].append((launched - done.at, launched - done.healed_at))
                print(
                    f"  {name}: {launched - done.at:.2f} s after the fault, "
                    f"{launched - done.healed_at:.2f} s after it healed",
                    flush=True,
                )
                fires_go_on(infra, fires=2)
        check_workload(infra, load)  # and nothing lost, doubled or live twice meanwhile
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}"
    )
    args = parser.parse_args(argv)
    # The benchmark's own ZooKeeper client reconnects noisily through the faults.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    chosen = [f for f in args.faults.split(",") if f]
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    results = run(args.rounds, chosen)
    print(
        f"faults: 3 ZooKeeper servers, 2 replicas, 3 agents, jobs every 2 s, session timeout "
        f"{SESSION_S:g} s, quorum loss and partition held {SESSION_S + 3:g} s, {args.rounds} "
        "rounds each"
    )
    print(f"{'fault':<12} {'fault->on time p50/max':>24} {'healed->on time p50/max':>25}")
    for name, pairs in results.items():
        from_fault = [a for a, _ in pairs]
        from_heal = [b for _, b in pairs]
        print(
            f"{name:<12} {statistics.median(from_fault):>14.2f} / {max(from_fault):>5.2f} s "
            f"{statistics.median(from_heal):>15.2f} / {max(from_heal):>5.2f} s"
        )
