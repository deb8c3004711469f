"""Hand-over benchmark: three replica processes, N graceful stops and N crashes of the leader.

Prints, per kind, the median and max time from the signal to a new leader answering `/health`
as leader, and the session timeout used. Run: `./dev.sh bench ha [--rounds N]`.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess


def _leader(replicas: list[ReplicaProcess]) -> ReplicaProcess | None:
    found = [r for r in replicas if r.alive() and r.is_leader()]
    return found[0] if len(found) == 1 else None


def _wait_leader(replicas: list[ReplicaProcess], timeout_s: float) -> ReplicaProcess:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = _leader(replicas)
        if leader is not None:
            return leader
        time.sleep(0.005)
    raise RuntimeError("no leader within the deadline")


def run(rounds: int, session_timeout_s: float) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"graceful (SIGTERM)": [], "crash (SIGKILL)": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        settings: dict[str, Any] = {
            "zk_namespace": namespace,
            "zk_session_timeout_seconds": session_timeout_s,
        }
        replicas = [ReplicaProcess(zk.hosts, base, **settings).start() for _ in range(3)]
        try:
            for kind, signum in (
                ("graceful (SIGTERM)", signal.SIGTERM),
                ("crash (SIGKILL)", signal.SIGKILL),
            ):
                for _ in range(rounds):
                    leader = _wait_leader(replicas, 60)
                    # Let every standby be in the election before measuring.
                    time.sleep(0.5)
                    began = time.monotonic()
                    leader.signal(signum)
                    rest = [r for r in replicas if r is not leader]
                    _wait_leader(rest, session_timeout_s + 30)
                    results[kind].append(time.monotonic() - began)
                    leader.wait(30)
                    # Replace the stopped replica so there are always three.
                    replicas.remove(leader)
                    replicas.append(ReplicaProcess(zk.hosts, base, **settings).start())
        finally:
            for r in replicas:
                r.stop()
            zk.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-timeout", type=float, default=4.0)
    args = parser.parse_args(argv)
    results = run(args.rounds, args.session_timeout)
    print(
        f"hand-over with 3 replicas, session timeout {args.session_timeout:g} s, "
        f"{args.rounds} rounds each"
    )
    for kind, times in results.items():
        print(
            f"  {kind:20s} median {statistics.median(times) * 1000:8.1f} ms   "
            f"max {max(times) * 1000:8.1f} ms"
        )


if __name__ == "__main__":
    main()
