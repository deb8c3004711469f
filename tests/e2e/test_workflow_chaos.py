"""Workflow chaos (issue 27): three replica processes, two workflows of several nodes firing
every 5 s (a diamond whose first node has 2 shards, and a chain of three), and the leader
SIGKILLed, SIGTERMed and frozen with SIGSTOP past its ZooKeeper session timeout, in turn, for
about 36 s. Then, the workflows disabled and every run ended:

- every run succeeded: no node was skipped or failed that should have run;
- every shard of every node of every run ran exactly once (the job code's own record, by the run
  id it was given), none twice, none lost;
- in order: no node started before each of its parents had ended, in the same run;
- every run the job code saw is a run the API lists (no run outside the ledger).

The figures (runs, kills, leader changes) are printed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import LEADER_BLOWS, running_system, strike_leader
from tests.e2e.test_workflows import ENDED, Flow, flow_on, node
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

CRON = "0/5 * * * * ?"
CHAOS_S = 36.0
SESSION_S = 4.0  # the replicas' zk_session_timeout_seconds (ReplicaProcess's default)
APP = "wf_app"
# workflow -> {node: (job, shards, parents)}
GRAPHS: dict[str, dict[str, tuple[str, int, tuple[str, ...]]]] = {
    "diamond": {
        "A": ("c_a", 2, ()),
        "B": ("c_b", 1, ("A",)),
        "C": ("c_c", 1, ("A",)),
        "D": ("c_d", 1, ("B", "C")),
    },
    "chain": {"X": ("c_x", 1, ()), "Y": ("c_y", 1, ("X",)), "Z": ("c_z", 1, ("Y",))},
}


@pytest.fixture
def flow(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[Flow]:
    with running_system(zk.hosts, zk_namespace, tmp_path, replicas=3) as system:
        yield flow_on(system, tmp_path)


def all_runs(flow: Flow, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = ""
    while True:
        query = f"?limit=500&cursor={cursor}" if cursor else "?limit=500"
        status, page = flow.api("GET", f"/api/workflow/{name}/runs{query}")
        assert status == 200, page
        found += page["items"]
        cursor = page.get("nextCursor") or ""
        if not cursor:
            return found


def runs_seen(flow: Flow) -> int:
    return len({ln.run for ln in flow.lines() if ln.run != "none"})


@pytest.mark.timeout(300)
def test_leader_chaos_runs_every_node_of_every_run_exactly_once_in_order(
    flow: Flow, zk: ZooKeeperEnsemble, zk_namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    system = flow.system
    for graph in GRAPHS.values():
        for job, shards, _ in graph.values():
            # failover on: a task lost with a leader between its bookkeeping and its launch is
            # launched again, which counts as the node's run.
            flow.job(job, shards=shards, sleep_s=0.3)
            status, body = flow.api("PUT", "/api/job/update", {"jobName": job, "failover": True})
            assert status == 204, body
    for name, graph in GRAPHS.items():
        nodes = [node(n, job, *parents) for n, (job, _, parents) in graph.items()]
        flow.workflow(name, nodes, cron=CRON, misfire=True)
    wait_for(lambda: runs_seen(flow) >= 2, 30, message="both workflows ran")

    kills = {"SIGKILL": 0, "SIGTERM": 0, "SIGSTOP": 0}
    began = time.monotonic()
    turn = 0
    while time.monotonic() - began < CHAOS_S:
        how = LEADER_BLOWS[turn % len(LEADER_BLOWS)]
        turn += 1
        kills[how] += 1
        current = strike_leader(system, zk.hosts, zk_namespace, how, SESSION_S + 2)
        # Let the new leader start a few runs before the next blow.
        mark = runs_seen(flow)
        wait_for(
            lambda mark=mark: runs_seen(flow) >= mark + 2,  # type: ignore[misc]
            30,
            message=f"runs go on under {current.identity}",
        )

    # A quiet end: no more fires, every run ended.
    for name in GRAPHS:
        status, body = flow.api("POST", f"/api/workflow/{name}/disable")
        assert status in (200, 204), body

    def all_ended() -> dict[str, list[dict[str, Any]]] | None:
        found = {name: all_runs(flow, name) for name in GRAPHS}
        over = all(r["state"] in ENDED for listed in found.values() for r in listed)
        return found if over else None

    runs = wait_for(all_ended, 90, interval_s=0.5, message="every run ended")
    lines = flow.lines()
    listed = {r["runId"] for name in GRAPHS for r in runs[name]}
    seen = {ln.run for ln in lines if ln.run != "none"}
    assert seen <= listed, f"runs the job code saw that the API does not list: {seen - listed}"
    starts = Counter((ln.run, ln.job, ln.item) for ln in lines if ln.event == "start")
    for name, graph in GRAPHS.items():
        for run in runs[name]:
            run_id = run["runId"]
            assert run["state"] == "succeeded", flow.run(name, run_id)
            for _node, (job, shards, parents) in graph.items():
                for item in range(shards):
                    assert starts[(run_id, job, item)] == 1, (run_id, job, item)
                first_start = min(
                    ln.at
                    for ln in lines
                    if ln.run == run_id and ln.job == job and ln.event == "start"
                )
                for parent in parents:
                    parent_job = graph[parent][0]
                    last_end = max(
                        ln.at
                        for ln in lines
                        if ln.run == run_id and ln.job == parent_job and ln.event == "end"
                    )
                    assert first_start >= last_end, (run_id, job, parent_job)
    assert all(len(runs[name]) >= CHAOS_S / 5 * 0.4 for name in GRAPHS), {
        name: len(found) for name, found in runs.items()
    }  # runs went on through the chaos

    changes = 0.0
    for r in system.replicas:
        if r.alive():
            try:
                changes += r.metrics().get("ejc_leader_changes_total", 0)
            except OSError:
                pass
    with capsys.disabled():
        print(f"\nworkflow chaos: {time.monotonic() - began:.0f} s, leader kills {kills}, "
              f"runs {({n: len(r) for n, r in runs.items()})}, node starts {sum(starts.values())}, "
              f"leader changes seen by the live replicas {changes:.0f}")  # fmt: skip
