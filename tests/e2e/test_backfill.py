"""Backfill (issue 28) end to end: scheduler replica processes, the local Mesos stand-in with two
agents, real executors and command tasks, one cluster for the whole module; the `ejcloud` CLI
through a standby for the user's side.

Every job runs bf.sh, which appends a line per shard start and end with the job, the shard, the
fire time and the backfill id it was given (EJC_FIRE_TIME, EJC_BACKFILL_ID), so the tests read
what really ran, for which fire and in which order, not what the API says ran.

The jobs fire at minutes 0-29 of one hour of the day, the hour two hours before the module
started (UTC): a backfill of that hour's range is 30 past fires, and the cron itself never fires
while the tests run, so every run seen is a backfill's.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from ejcloud_cli.runs import RUN_HEADERS
from tests.e2e.pipeline_support import System, running_system, strike_leader
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

APP = "bf_app"
FIRES = 30
SHARDS = 2
BF_SH = """#!/bin/sh
# One line per shard start and end: "<event> <job> <item> <fire time> <backfill id> <epoch>".
out="{out}"
echo "start $EJC_JOB_NAME $EJC_SHARDING_ITEM ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}} $(date +%s.%N)" >> "$out"
sleep "${{SLEEP_S:-0}}"
echo "end $EJC_JOB_NAME $EJC_SHARDING_ITEM ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}} $(date +%s.%N)" >> "$out"
"""  # noqa: E501


@dataclass(frozen=True)
class Line:
    event: str
    job: str
    item: int
    fire: str
    backfill: str
    at: float

    @property
    def fire_at(self) -> datetime:
        return instant(self.fire)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@dataclass
class Bed:
    """The cluster, its app, the record file and the past hour the jobs' crons fire in."""

    system: System
    record: Path
    cli: Cli
    hour_start: datetime  # minute 0 of the past hour (UTC) whose minutes 0-29 are the fires

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.system.api(method, path, body)

    @property
    def start(self) -> str:
        return self.hour_start.isoformat().replace("+00:00", "Z")

    @property
    def end(self) -> str:
        last = self.hour_start + timedelta(minutes=59, seconds=59)
        return last.isoformat().replace("+00:00", "Z")

    def fire_times(self) -> list[datetime]:
        return [self.hour_start + timedelta(minutes=m) for m in range(FIRES)]

    def job(self, name: str, *, shards: int = 1, sleep_s: float = 0) -> None:
        body = {
            "jobName": name,
            "appName": APP,
            "jobType": "SCRIPT",
            "jobExecutionType": "TRANSIENT",
            "scriptCommandLine": f"SLEEP_S={sleep_s:g} sh bf.sh",
            "cron": f"0 0-{FIRES - 1} {self.hour_start.hour} * * ?",
            "timeZone": "UTC",
            "shardingTotalCount": shards,
            "misfire": True,
            "cpuCount": 0.1,
            "memoryMB": 16,
        }
        status, answer = self.api("POST", "/api/job/register", body)
        assert status == 204, answer

    def backfill(self, job: str, **extra: Any) -> dict[str, Any]:
        body = {"from": self.start, "to": self.end, **extra}
        status, answer = self.api("POST", f"/api/job/{job}/backfill", body)
        assert status == 201, (status, answer)
        assert isinstance(answer, dict)
        return answer

    def state(self, job: str, backfill_id: str) -> dict[str, Any]:
        status, answer = self.api("GET", f"/api/job/{job}/backfills/{backfill_id}")
        assert status == 200, (status, answer)
        assert isinstance(answer, dict)
        return answer

    def lines(self, job: str, event: str = "start") -> list[Line]:
        if not self.record.exists():
            return []
        found = []
        for text in self.record.read_text().splitlines():
            parts = text.split()
            if len(parts) < 6 or parts[1] != job or parts[0] != event:
                continue  # another job's, or a line being written
            found.append(
                Line(parts[0], parts[1], int(parts[2]), parts[3], parts[4], float(parts[5]))
            )
        return found

    def runs(self, job: str) -> list[dict[str, Any]]:
        status, answer = self.api("GET", f"/api/job/{job}/runs?limit=500")
        assert status == 200, answer
        return list(answer["runs"])


def _cli_for(system: System, home: Path) -> Cli:
    """The CLI against every replica, a standby first (its writes are redirected)."""
    leader = system.leader()
    ordered = sorted(system.replicas, key=lambda r: r is leader)
    servers = ",".join(f"http://{r.identity}" for r in ordered)
    return Cli(home, EJCLOUD_SERVER=servers, EJCLOUD_USER="root", EJCLOUD_PASSWORD="root")


@pytest.fixture(scope="module")
def bed(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    tmp = tmp_path_factory.mktemp("backfill")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    hour_start = two_hours_ago.replace(minute=0, second=0, microsecond=0)
    with running_system(zk.hosts, namespace, tmp, replicas=2) as system:
        record = Path(system.make_app(APP, script=BF_SH, file="bf.sh"))
        yield Bed(system, record, _cli_for(system, tmp / "home"), hour_start)


def holds_for(check: Callable[[], bool], duration_s: float, message: str) -> None:
    """`check()` is true at every look for `duration_s` (a failing look fails at once)."""
    deadline = time.monotonic() + duration_s
    while True:
        assert check(), message
        if time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def assert_ran_once_each_in_order(bed: Bed, job: str, backfill_id: str, shards: int) -> None:
    """Every fire of the range ran once per shard, with this backfill's id, in fire order."""
    starts = bed.lines(job)
    expected = bed.fire_times()
    assert {ln.backfill for ln in starts} == {backfill_id}
    counts = Counter((ln.fire_at, ln.item) for ln in starts)
    twice = {key: n for key, n in counts.items() if n > 1}
    assert not twice, f"runs started more than once: {twice}"
    assert set(counts) == {(fire, item) for fire in expected for item in range(shards)}
    fires_in_order = [ln.fire_at for ln in starts]
    assert fires_in_order == sorted(fires_in_order), "a fire started before an earlier one"


def test_a_dry_run_lists_the_fires_and_writes_nothing_and_a_range_over_the_cap_is_a_400(
    bed: Bed,
) -> None:
    bed.job("bf_dry")
    status, answer = bed.api(
        "POST", "/api/job/bf_dry/backfill", {"from": bed.start, "to": bed.end, "dryRun": True}
    )
    assert 200 <= status < 300, (status, answer)
    assert answer["backfillId"] is None and answer["fires"] == FIRES
    assert [instant(t) for t in answer["fireTimes"]] == bed.fire_times()

    # The CLI's dry run: the count, then each fire; --json is the server's answer.
    out = bed.cli.ok("job", "backfill", "bf_dry", "--from", bed.start, "--to", bed.end, "--dry-run")
    head, *times = out.splitlines()
    assert head == f"job bf_dry: {FIRES} fires; dry run, nothing was recorded"
    assert [instant(t) for t in times] == bed.fire_times()
    shown = bed.cli.json(
        "job", "backfill", "bf_dry", "--from", bed.start, "--to", bed.end, "--dry-run"
    )
    assert shown["fires"] == FIRES and shown["backfillId"] is None

    # Nothing was recorded: no backfill listed, nothing ran.
    status, listed = bed.api("GET", "/api/job/bf_dry/backfills")
    assert status == 200, listed
    assert (listed["items"] if isinstance(listed, dict) else listed) == []
    assert "no backfills of job bf_dry" in bed.cli("job", "backfills", "bf_dry").stderr
    assert bed.lines("bf_dry") == []

    # 41 days of 30 fires: over the default cap (1,000), named with the count; nothing written.
    wide_from = (bed.hour_start - timedelta(days=40)).isoformat()
    status, answer = bed.api("POST", "/api/job/bf_dry/backfill", {"from": wide_from, "to": bed.end})
    assert status == 400, answer
    assert "1,230" in answer["error"] and "1,000" in answer["error"], answer
    done = bed.cli("job", "backfill", "bf_dry", "--from", wide_from, "--to", bed.end)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("ejcloud: error:") == 1 and "1,230" in done.stderr, done.stderr
    status, listed = bed.api("GET", "/api/job/bf_dry/backfills")
    assert (listed["items"] if isinstance(listed, dict) else listed) == []

    # Unknown job: exit 4 (404); a malformed time: 400 naming the field (exit 1).
    assert (
        bed.cli("job", "backfill", "nosuch", "--from", bed.start, "--to", bed.end).returncode == 4
    )
    bad = bed.cli("job", "backfill", "bf_dry", "--from", "yesterday", "--to", bed.end)
    assert bad.returncode == 1 and "from:" in bad.stderr, bad.stderr


def test_a_backfill_of_30_past_fires_runs_each_once_per_shard_in_order_marked_in_the_runs(
    bed: Bed,
) -> None:
    bed.job("bf_plain", shards=SHARDS)
    began = time.monotonic()
    answer = bed.backfill("bf_plain", overlapPolicy="FORBID")
    backfill_id = answer["backfillId"]
    assert answer["fires"] == FIRES
    assert [instant(t) for t in answer["fireTimes"]] == bed.fire_times()

    wait_for(
        lambda: (
            bed.state("bf_plain", backfill_id)["status"] == "DONE"
            and len(bed.lines("bf_plain", "end")) >= FIRES * SHARDS
        ),
        90,
        interval_s=0.25,
        message="every fire of the backfill ran",
    )
    took_s = time.monotonic() - began
    print(f"\nbackfill of {FIRES} fires x {SHARDS} shards: {took_s:.1f} s")
    assert_ran_once_each_in_order(bed, "bf_plain", backfill_id, SHARDS)
    state = bed.state("bf_plain", backfill_id)
    assert state["launched"] == FIRES and state["nextFireTime"] is None

    # The CLI's list shows it, done.
    out = bed.cli.ok("job", "backfills", "bf_plain")
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATUS", "FIRES", "LAUNCHED", "FROM", "TO", "CREATED_UTC"]
    assert row.split()[:4] == [backfill_id, "DONE", str(FIRES), str(FIRES)]

    # The runs view marks each run with its backfill and its logical fire time.
    def marked() -> list[dict[str, Any]] | None:
        found = [r for r in bed.runs("bf_plain") if r.get("endTime")]
        return found if len(found) >= FIRES * SHARDS else None

    runs = wait_for(marked, 30, interval_s=0.5, message="the runs in the runs view")
    seen = Counter((instant(r["fireTime"]), r["shardingItem"]) for r in runs)
    assert seen == Counter({(f, i): 1 for f in bed.fire_times() for i in range(SHARDS)})
    marks = {r.get("backfillId") for r in runs}
    assert marks == {backfill_id}, f"the runs view's backfillId of the backfill's runs: {marks}"
    # And `ejcloud runs`: each row's fire (the newest first) and its backfill.
    table = bed.cli.ok("runs", "bf_plain", "-n", "2").splitlines()
    assert table[0].split() == list(RUN_HEADERS)
    newest = max(bed.fire_times()).strftime("%Y-%m-%d %H:%M:%S")
    assert all(newest in line and backfill_id in line for line in table[1:3]), table


def test_pause_holds_every_fire_resume_goes_on_and_cancel_ends_it_through_the_cli(
    bed: Bed,
) -> None:
    bed.job("bf_paced")
    out = bed.cli.ok(
        "job", "backfill", "bf_paced", "--from", bed.start, "--to", bed.end, "--rate", "60"
    )
    backfill_id = out.split()[1]
    assert out.startswith(f"backfill {backfill_id} of job bf_paced started: {FIRES} fires")

    wait_for(lambda: len(bed.lines("bf_paced")) >= 3, 30, message="three fires ran")
    assert bed.cli.ok("job", "backfill-pause", "bf_paced", backfill_id).startswith(
        f"backfill {backfill_id} of job bf_paced paused"
    )
    paused = bed.state("bf_paced", backfill_id)
    assert paused["status"] == "PAUSED" and paused["launched"] < FIRES
    # A fire launched just before the pause may still start; after that, nothing for 4 s at a
    # rate that would have launched about 4 more.
    wait_for(
        lambda: len(bed.lines("bf_paced")) == paused["launched"],
        20,
        message="the fires launched before the pause started",
    )
    held = len(bed.lines("bf_paced"))

    def still_paused() -> bool:
        now = bed.state("bf_paced", backfill_id)
        return (
            now["status"] == "PAUSED"
            and now["launched"] == paused["launched"] < FIRES
            and len(bed.lines("bf_paced")) == held
        )

    holds_for(still_paused, 4, "a fire launched while the backfill was paused")
    shown = bed.cli.json("job", "backfill-show", "bf_paced", backfill_id)
    assert shown["status"] == "PAUSED" and shown["launched"] == held

    bed.cli.ok("job", "backfill-resume", "bf_paced", backfill_id)
    wait_for(lambda: len(bed.lines("bf_paced")) >= held + 2, 30, message="fires after resume")
    cancelled = bed.cli.json("job", "backfill-cancel", "bf_paced", backfill_id)
    assert cancelled["ok"] is True and cancelled["action"] == "backfill-cancel"
    ended = bed.state("bf_paced", backfill_id)
    assert ended["status"] == "CANCELLED" and ended["endedAt"]
    launched = ended["launched"]
    assert held + 2 <= launched < FIRES
    wait_for(lambda: len(bed.lines("bf_paced")) == launched, 20, message="launched fires started")
    holds_for(
        lambda: (
            len(bed.lines("bf_paced")) == launched
            and bed.state("bf_paced", backfill_id)["launched"] == launched
        ),
        4,
        "a fire launched after the cancel",
    )
    # The fires that ran are the first ones, once each, in order.
    fires = [ln.fire_at for ln in bed.lines("bf_paced")]
    assert fires == bed.fire_times()[:launched]

    # A cancelled backfill cannot be resumed: 409, exit code 6, the message printed once.
    refused = bed.cli("job", "backfill-resume", "bf_paced", backfill_id)
    assert refused.returncode == 6, refused.stderr
    assert refused.stderr.count("ejcloud: error:") == 1 and "CANCELLED" in refused.stderr
    listed = bed.cli.json("job", "backfills", "bf_paced")
    assert [(b["backfillId"], b["status"]) for b in listed] == [(backfill_id, "CANCELLED")]


def test_cancel_with_kill_running_kills_the_fire_that_runs_and_launches_no_other(
    bed: Bed,
) -> None:
    bed.job("bf_killed", sleep_s=60)
    backfill_id = bed.backfill("bf_killed", overlapPolicy="FORBID")["backfillId"]
    wait_for(lambda: len(bed.lines("bf_killed")) == 1, 30, message="the first fire started")

    def running() -> list[dict[str, Any]]:
        return [t for t in bed.system.running() if t["metaInfo"]["jobName"] == "bf_killed"]

    assert len(running()) == 1
    done = bed.cli.json("job", "backfill-cancel", "bf_killed", backfill_id, "--kill-running")
    assert done["status"] == "CANCELLED", done
    wait_for(lambda: not running(), 20, message="the running fire killed")
    state = bed.state("bf_killed", backfill_id)
    assert state["status"] == "CANCELLED" and state["launched"] == 1
    holds_for(
        lambda: len(bed.lines("bf_killed")) == 1 and not bed.lines("bf_killed", "end"),
        2,
        "a fire ran on, or another launched, after the cancel with killRunning",
    )


def test_a_backfill_runs_each_fire_once_in_order_across_a_leader_kill(
    bed: Bed, zk: ZooKeeperEnsemble
) -> None:
    system = bed.system
    bed.job("bf_struck", sleep_s=0.2)
    answer = bed.backfill("bf_struck", overlapPolicy="FORBID")
    backfill_id = answer["backfillId"]
    wait_for(lambda: len(bed.lines("bf_struck")) >= 6, 60, message="some fires ran")
    ran_before = len(bed.lines("bf_struck"))
    assert ran_before < FIRES - 5, "the backfill ran too fast to kill its leader in the middle"
    namespace = system.replicas[0].settings["zk_namespace"]
    strike_leader(system, zk.hosts, namespace, "SIGKILL", 0)
    wait_for(
        lambda: (
            bed.state("bf_struck", backfill_id)["status"] == "DONE"
            and len(bed.lines("bf_struck", "end")) >= FIRES
        ),
        90,
        interval_s=0.25,
        message="every fire of the backfill ran under the new leader",
    )
    assert_ran_once_each_in_order(bed, "bf_struck", backfill_id, 1)
    print(f"\nleader killed after {ran_before} of {FIRES} fires")
