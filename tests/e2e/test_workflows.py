"""Workflows (issue 27) end to end: two replica processes, the local Mesos stand-in with two
agents, real command tasks, one cluster for the whole module.

Every node's job runs wf.sh, which appends a line per shard start and end with the job, the
shard, the run id it got (EJC_WORKFLOW_RUN_ID) and the time, so the tests read what really ran,
in which run and in which order: not what the API says ran. A job fails while a file
`<record>.fail.<job>` exists, and sleeps as its command line says.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"

APP = "wf_app"
RUN_END_S = 60
SESSION_S = 4.0  # the replicas' zk_session_timeout_seconds (ReplicaProcess's default)
ENDED = {"succeeded", "failed", "cancelled", "timed_out"}
WF_SH = """#!/bin/sh
# One line per shard start and end: "<event> <job> <item> <run id> <epoch> [ok|failed]".
out="{out}"
run="${{EJC_WORKFLOW_RUN_ID:-none}}"
echo "start $EJC_JOB_NAME $EJC_SHARDING_ITEM $run $(date +%s.%N)" >> "$out"
echo "wf-marker $EJC_JOB_NAME shard $EJC_SHARDING_ITEM run $run"
echo "$1" > "$out.context.$EJC_JOB_NAME.$EJC_SHARDING_ITEM"
sleep "${{SLEEP_S:-0}}"
if [ -e "$out.fail.$EJC_JOB_NAME" ]; then
  echo "end $EJC_JOB_NAME $EJC_SHARDING_ITEM $run $(date +%s.%N) failed" >> "$out"; exit 3
fi
echo "end $EJC_JOB_NAME $EJC_SHARDING_ITEM $run $(date +%s.%N) ok" >> "$out"
"""


@dataclass(frozen=True)
class Line:
    event: str
    job: str
    item: int
    run: str
    at: float
    ok: bool | None


@dataclass
class Flow:
    """The cluster, its one app and the record file of what the jobs did."""

    system: System
    record: Path

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.system.api(method, path, body)

    def lines(self) -> list[Line]:
        if not self.record.exists():
            return []
        found = []
        for text in self.record.read_text().splitlines():
            parts = text.split()
            if len(parts) < 5:
                continue  # a line being written
            ok = None if parts[0] == "start" else (parts[5] == "ok" if len(parts) > 5 else None)
            found.append(Line(parts[0], parts[1], int(parts[2]), parts[3], float(parts[4]), ok))
        return found

    def of(self, run: str, job: str, event: str = "start") -> list[Line]:
        return [ln for ln in self.lines() if ln.run == run and ln.job == job and ln.event == event]

    def job(self, name: str, *, shards: int = 1, sleep_s: float = 0, cron: str = "") -> None:
        body = {
            "jobName": name,
            "appName": APP,
            "jobType": "SCRIPT",
            "jobExecutionType": "TRANSIENT",
            "scriptCommandLine": f"SLEEP_S={sleep_s:g} sh wf.sh",
            "cron": cron,
            "shardingTotalCount": shards,
            "cpuCount": 0.1,
            "memoryMB": 16,
        }
        status, answer = self.api("POST", "/api/job/register", body)
        assert status == 204, answer

    def fail(self, job: str, failing: bool = True) -> None:
        flag = Path(f"{self.record}.fail.{job}")
        if failing:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def workflow(self, name: str, nodes: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        body = {"workflowName": name, "appName": APP, "nodes": nodes, **fields}
        status, answer = self.api("POST", "/api/workflow", body)
        assert status in (200, 201, 204), answer
        return body

    def trigger(self, name: str) -> str:
        status, answer = self.api("POST", f"/api/workflow/{name}/trigger")
        assert 200 <= status < 300, answer
        run_id: str = answer["runId"]
        return run_id

    def run(self, name: str, run_id: str) -> dict[str, Any]:
        status, answer = self.api("GET", f"/api/workflow/{name}/runs/{run_id}")
        assert status == 200, answer
        return dict(answer)

    def ended(self, name: str, run_id: str, timeout_s: float = RUN_END_S) -> dict[str, Any]:
        def over() -> dict[str, Any] | None:
            found = self.run(name, run_id)
            return found if found["state"] in ENDED else None

        return wait_for(over, timeout_s, interval_s=0.2, message=f"run {run_id} ended")

    def states(self, run: dict[str, Any]) -> dict[str, str]:
        return {n["name"]: n["state"] for n in run["nodes"]}


def node(name: str, job: str, *parents: str, condition: str = "on_success") -> dict[str, Any]:
    return {"name": name, "job": job, "dependsOn": list(parents), "condition": condition}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    manager = sync_playwright().start()
    try:
        launched = manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
    finally:
        manager.stop()


def flow_on(system: System, tmp: Path) -> Flow:
    """The workflow app (its recording script packaged by `system`) registered on `system`."""
    return Flow(system, Path(system.make_app(APP, script=WF_SH, file="wf.sh")))


@pytest.fixture(scope="module")
def flow(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    tmp = tmp_path_factory.mktemp("workflows")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    with running_system(zk.hosts, namespace, tmp, replicas=2) as system:
        yield flow_on(system, tmp)


def starts_after_ends(flow: Flow, run: str, parents: list[str], child: str) -> None:
    """Every shard of `child` started after every shard of each parent ended, in `run`."""
    first_start = min(ln.at for ln in flow.of(run, child))
    last_end = max(ln.at for p in parents for ln in flow.of(run, p, "end"))
    assert first_start >= last_end, (child, parents)


def test_a_diamond_runs_in_order_and_branches_follow_their_conditions(flow: Flow) -> None:
    for job, shards in (("d_a", 2), ("d_b", 1), ("d_c", 1), ("d_d", 1), ("d_e", 1), ("d_f", 1)):
        flow.job(job, shards=shards)
    flow.workflow(
        "diamond",
        [
            node("A", "d_a"),
            node("B", "d_b", "A"),
            node("C", "d_c", "A"),
            node("D", "d_d", "B", "C"),
            node("E", "d_e", "B", condition="on_failure"),
            node("F", "d_f", "B", "C", condition="on_done"),
        ],
    )
    # All succeed: D once after both B and C; the on_failure branch is skipped, on_done runs.
    first = flow.trigger("diamond")
    done = flow.ended("diamond", first)
    assert done["state"] == "succeeded", done
    assert flow.states(done) == {
        "A": "succeeded", "B": "succeeded", "C": "succeeded",
        "D": "succeeded", "E": "skipped", "F": "succeeded",
    }  # fmt: skip
    assert sorted(ln.item for ln in flow.of(first, "d_a")) == [0, 1]
    assert [len(flow.of(first, j)) for j in ("d_b", "d_c", "d_d", "d_e", "d_f")] == [1, 1, 1, 0, 1]
    starts_after_ends(flow, first, ["d_a"], "d_b")
    starts_after_ends(flow, first, ["d_a"], "d_c")
    starts_after_ends(flow, first, ["d_b", "d_c"], "d_d")
    starts_after_ends(flow, first, ["d_b", "d_c"], "d_f")
    # Every shard saw which run it belonged to, in its sharding context too.
    context = json.loads(Path(f"{flow.record}.context.d_a.1").read_text())
    assert (context["workflowName"], context["workflowRunId"]) == ("diamond", first)
    assert context["fireTime"]
    # B fails: D is skipped but C runs; E (on_failure) and F (on_done) run; the run failed.
    flow.fail("d_b")
    try:
        second = flow.trigger("diamond")
        done = flow.ended("diamond", second)
    finally:
        flow.fail("d_b", False)
    assert done["state"] == "failed", done
    assert flow.states(done) == {
        "A": "succeeded", "B": "failed", "C": "succeeded",
        "D": "skipped", "E": "succeeded", "F": "succeeded",
    }  # fmt: skip
    assert [len(flow.of(second, j)) for j in ("d_b", "d_c", "d_d", "d_e", "d_f")] == [1, 1, 0, 1, 1]
    starts_after_ends(flow, second, ["d_b"], "d_e")
    b = {n["name"]: n for n in done["nodes"]}["B"]
    assert b["taskIds"] and b["reason"], b
    status, runs = flow.api("GET", "/api/workflow/diamond/runs")
    assert status == 200
    assert [r["runId"] for r in runs["items"]] == [second, first]  # newest first


def test_the_console_draws_a_run_and_a_node_leads_to_its_logs(flow: Flow, browser: Browser) -> None:
    for job in ("g_a", "g_b", "g_c"):
        flow.job(job)
    flow.workflow(
        "graph",
        [node("a", "g_a"), node("b", "g_b", "a"), node("c", "g_c", "b", condition="on_failure")],
    )
    flow.fail("g_b")
    try:
        run = flow.trigger("graph")
        flow.ended("graph", run)
    finally:
        flow.fail("g_b", False)
    leader = flow.system.leader()
    assert leader is not None
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"http://{leader.identity}/#/workflows")
        page.fill("#login-user", "root")
        page.fill("#login-password", "root")
        page.click("form#login button[type=submit]")
        expect(page.locator("[data-table=workflows]")).to_contain_text("graph")
        page.goto(f"http://{leader.identity}/#/workflows/graph/runs/{run}")
        drawn = page.locator("svg[data-graph=workflow]")
        expect(drawn.locator("[data-node=a]")).to_have_attribute("data-state", "succeeded")
        expect(drawn.locator("[data-node=b]")).to_have_attribute("data-state", "failed")
        expect(drawn.locator("[data-node=c]")).to_have_attribute("data-state", "succeeded")
        edge = drawn.locator('[data-edge="b->c"]')
        expect(edge).to_have_attribute("data-condition", "on_failure")
        expect(edge).to_contain_text("b → c: on_failure")  # its title
        expect(drawn.locator("[data-condition-of=c]")).to_have_text("on_failure")
        expect(drawn.locator("[data-condition-of=b]")).to_have_text("on_success")
        # The failed node's colour is the console's "bad" one, not the default.
        fill = drawn.locator("[data-node=b] rect").evaluate("r => getComputedStyle(r).fill")
        ok_fill = drawn.locator("[data-node=a] rect").evaluate("r => getComputedStyle(r).fill")
        assert fill != ok_fill
        # One click on the node shows its tasks; one more opens the task's page with its logs.
        drawn.locator("[data-node=b]").click()
        task = page.locator("[data-node-panel=b] a[data-task]").first
        expect(task).to_be_visible()
        expect(page.locator("[data-node-panel=b] [data-action=mark-success]")).to_be_visible()
        task.click()
        expect(page.locator("pre.log")).to_contain_text(f"wf-marker g_b shard 0 run {run}")
        assert errors == []
    finally:
        context.close()
    # The settings' guest (a viewer) sees the same graph, and no control that writes.
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"http://{leader.identity}/#/workflows/graph/runs/{run}?node=b")
        page.fill("#login-user", "guest")
        page.fill("#login-password", "guest")
        page.click("form#login button[type=submit]")
        expect(page.locator("[data-node-panel=b] a[data-task]").first).to_be_visible()
        expect(page.locator("svg[data-graph=workflow] [data-node=b]")).to_have_attribute(
            "data-state", "failed"
        )
        for action in ("retry", "cancel", "mark-success"):
            expect(page.locator(f"[data-action={action}]")).to_have_count(0)
    finally:
        context.close()


def test_fail_fast_cancels_the_running_nodes_and_skips_the_rest(flow: Flow) -> None:
    flow.job("ff_bad")
    flow.job("ff_slow", sleep_s=60)
    flow.job("ff_after")
    flow.fail("ff_bad")
    flow.workflow(
        "fastfail",
        [node("bad", "ff_bad"), node("slow", "ff_slow"), node("after", "ff_after", "slow")],
        failFast=True,
    )
    run = flow.trigger("fastfail")
    began = time.monotonic()
    done = flow.ended("fastfail", run, timeout_s=40)
    assert time.monotonic() - began < 40  # long before the slow node's 60 s
    assert done["state"] == "failed", done
    assert flow.states(done) == {"bad": "failed", "slow": "cancelled", "after": "skipped"}
    assert flow.of(run, "ff_after") == []
    # The slow node's task was killed, not left running.
    wait_for(
        lambda: not [t for t in flow.system.running() if t["metaInfo"]["jobName"] == "ff_slow"],
        20,
        message="the cancelled node's task killed",
    )


def test_retry_runs_again_only_what_failed_and_mark_success_releases_children(
    flow: Flow, tmp_path: Path
) -> None:
    for job in ("r_a", "r_b", "r_c"):
        flow.job(job)
    leader = flow.system.leader()
    assert leader is not None
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=leader.identity,
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )
    spec = tmp_path / "chain.yaml"
    spec.write_text(
        "workflowName: chain\n"
        f"appName: {APP}\n"
        "nodes:\n"
        "  - {name: a, job: r_a}\n"
        "  - {name: b, job: r_b, dependsOn: [a]}\n"
        "  - {name: c, job: r_c, dependsOn: [b]}\n"
    )
    assert cli.ok("workflow", "add", "-f", str(spec)).strip() == "workflow chain registered"
    shown = cli.json("workflow", "show", "chain")
    assert [n["name"] for n in shown["nodes"]] == ["a", "b", "c"] and shown["enabled"] is True
    # An update of one field keeps the others (the CLI sends the whole definition).
    cli.ok("workflow", "update", "chain", "--description", "a, b then c")
    updated = cli.json("workflow", "show", "chain")
    assert updated == {**shown, "description": "a, b then c"}
    listed = cli.ok("workflow", "list").splitlines()
    assert any(line.split()[:2] == ["chain", APP] for line in listed), listed
    flow.fail("r_b")
    waited = cli("workflow", "trigger", "chain", "--wait", "--wait-timeout", "60", timeout_s=90)
    assert waited.returncode == 1, waited.stderr  # the run failed
    run = cli.json("workflow", "runs", "chain", "-n", "1")[0]["runId"]
    assert flow.states(flow.run("chain", run)) == {"a": "succeeded", "b": "failed", "c": "skipped"}
    table = cli.ok("workflow", "run", "chain", run)
    assert [line.split()[:2] for line in table.splitlines()[-3:]] == [
        ["a", "succeeded"], ["b", "failed"], ["c", "skipped"],
    ]  # fmt: skip
    # Retry after the cause is gone: b and c run in the same run, a does not run again.
    flow.fail("r_b", False)
    assert cli.ok("workflow", "retry", "chain", run).startswith(f"run {run} of workflow chain")
    done = flow.ended("chain", run)
    assert done["state"] == "succeeded", done
    assert [len(flow.of(run, j)) for j in ("r_a", "r_b", "r_c")] == [1, 2, 1]
    starts_after_ends(flow, run, ["r_b"], "r_c")

    # Mark-success: a failed parent counted as succeeded lets its child go on.
    flow.fail("r_a")
    try:
        second = flow.trigger("chain")
        failed = flow.ended("chain", second)
    finally:
        flow.fail("r_a", False)
    assert flow.states(failed) == {"a": "failed", "b": "skipped", "c": "skipped"}
    marked = cli("workflow", "mark-success", "chain", second, "a")
    assert marked.returncode == 0, marked.stderr
    done = flow.ended("chain", second)
    assert done["state"] == "succeeded", done
    assert [len(flow.of(second, j)) for j in ("r_a", "r_b", "r_c")] == [1, 1, 1]


def test_an_edit_during_a_run_does_not_touch_that_run(flow: Flow) -> None:
    flow.job("e_first", sleep_s=4)
    flow.job("e_old")
    flow.job("e_new")
    flow.job("e_extra")
    flow.workflow("edited", [node("first", "e_first"), node("second", "e_old", "first")])
    run = flow.trigger("edited")
    wait_for(lambda: flow.of(run, "e_first"), 30, message="the first node started")
    changed = {
        "workflowName": "edited",
        "appName": APP,
        "nodes": [
            node("first", "e_first"),
            node("second", "e_new", "first"),
            node("third", "e_extra", "second"),
        ],
    }
    status, answer = flow.api("PUT", "/api/workflow", changed)
    assert status in (200, 204), answer
    done = flow.ended("edited", run)
    assert done["state"] == "succeeded", done
    assert [n["name"] for n in done["nodes"]] == ["first", "second"]
    assert [len(flow.of(run, j)) for j in ("e_old", "e_new", "e_extra")] == [1, 0, 0]
    # The next run is the new definition's.
    following = flow.trigger("edited")
    done = flow.ended("edited", following)
    assert [n["name"] for n in done["nodes"]] == ["first", "second", "third"]
    assert [len(flow.of(following, j)) for j in ("e_old", "e_new", "e_extra")] == [0, 1, 1]


def test_a_cron_workflow_with_misfire_catches_up_after_a_leaderless_gap(flow: Flow) -> None:
    """Last in the module: it freezes every replica. The fires that fell while no leader
    acted are each made a run (misfire on, one after another under FORBID), none twice."""
    flow.job("m_tick")
    flow.workflow("ticking", [node("tick", "m_tick")], cron="0/2 * * * * ?", misfire=True)

    def listed() -> list[dict[str, Any]]:
        status, page = flow.api("GET", "/api/workflow/ticking/runs?limit=200")
        assert status == 200, page
        return list(page["items"])

    wait_for(lambda: len(listed()) >= 2, 30, interval_s=0.2, message="the cron's first runs")
    replicas = [r for r in flow.system.replicas if r.alive()]
    frozen_at = time.time()
    for replica in replicas:
        replica.signal(signal.SIGSTOP)
    try:
        # Frozen past the leader's session timeout (4 s): no replica acts for ~4 fires.
        wait_for(lambda: time.time() - frozen_at > SESSION_S + 4, SESSION_S + 10, message="the gap")
    finally:
        for replica in replicas:
            replica.signal(signal.SIGCONT)
    resumed = time.time()
    wait_for(
        lambda: (
            (leader := flow.system.leader()) is not None
            and (leader.health() or {}).get("mesos") == "connected"
        ),
        40,
        message="a leader again",
    )
    wait_for(
        lambda: any(r["fireTime"] > resumed + 2 and r["state"] in ENDED for r in listed()),
        60,
        interval_s=0.2,
        message="caught up with the fires after the gap",
    )
    status, body = flow.api("POST", "/api/workflow/ticking/disable")
    assert status == 204, body

    def all_ended() -> list[dict[str, Any]] | None:
        found = listed()
        return found if all(r["state"] in ENDED for r in found) else None

    runs = wait_for(all_ended, 60, interval_s=0.2, message="every run ended")
    runs.sort(key=lambda r: r["fireTime"])
    fires = [r["fireTime"] for r in runs]
    assert all(abs(b - a - 2) < 0.01 for a, b in itertools.pairwise(fires)), fires  # no gap
    missed = [r for r in runs if frozen_at < r["fireTime"] < resumed]
    assert len(missed) >= 3, (frozen_at, resumed, fires)
    assert all(r["startedAt"] >= resumed - 1 for r in missed)  # made after the gap
    assert {r["state"] for r in runs} == {"succeeded"}
    assert all(len(flow.of(r["runId"], "m_tick")) == 1 for r in runs)  # each ran once
