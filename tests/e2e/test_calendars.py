"""Calendars on fires (issue 28) end to end: a scheduler replica process, the local Mesos
stand-in with two agents and real command tasks, one cluster for the module.

Each job runs cal.sh, which appends a line per run with the job and the fire time it was given
(EJC_FIRE_TIME), so the test reads what really ran, and for which fire. Two jobs fire every 2 s
at once: `quiet` lists a calendar excluding the 10 s just ahead, `edited` one excluding a day
far away that is edited (PUT) while the jobs fire to exclude the next 6 s.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system
from tests.support.waiting import wait_for

APP = "cal_app"
EVERY_2S = "0/2 * * * * ?"
CAL_SH = """#!/bin/sh
echo "$EJC_JOB_NAME $EJC_FIRE_TIME $(date +%s.%N)" >> "{out}"
"""


@dataclass
class Bed:
    system: System
    record: Path

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.system.api(method, path, body)

    def fires_run(self, job: str) -> list[float]:
        """The fire times (epoch seconds) of the runs of `job` that started."""
        if not self.record.exists():
            return []
        found = []
        for line in self.record.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == job:
                found.append(datetime.fromisoformat(parts[1]).timestamp())
        return found

    def excluded_rows(self, job: str) -> list[dict[str, Any]]:
        status, body = self.api(
            "GET", f"/api/job/events/statusTraces?jobName={job}&state=FIRE_EXCLUDED&per_page=100"
        )
        assert status == 200, body
        return list(body["rows"])

    def excluded_rows_if(self, job: str, at_least: int) -> list[dict[str, Any]] | None:
        rows = self.excluded_rows(job)
        return rows if len(rows) >= at_least else None


@pytest.fixture(scope="module")
def bed(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    tmp = tmp_path_factory.mktemp("calendars")
    with running_system(zk.hosts, f"t-{uuid.uuid4().hex[:12]}", tmp, replicas=1) as system:
        record = Path(system.make_app(APP, script=CAL_SH, file="cal.sh"))
        yield Bed(system, record)


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


def even_after(epoch_s: float) -> float:
    """The first even second at or after `epoch_s` (a fire of EVERY_2S)."""
    return float(math.ceil(epoch_s / 2) * 2)


def calendar(name: str, start: float, end: float) -> dict[str, Any]:
    return {
        "calendarName": name,
        "timeZone": "UTC",
        "excludeRanges": [{"from": iso(start), "to": iso(end)}],
    }


def job(name: str, calendars: list[str]) -> dict[str, Any]:
    return {
        "jobName": name,
        "appName": APP,
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh cal.sh",
        "cron": EVERY_2S,
        "timeZone": "UTC",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
        "excludeCalendars": calendars,
    }


def test_fires_in_excluded_periods_run_nothing_are_recorded_and_an_edit_applies_at_once(
    bed: Bed,
) -> None:
    # Given: the 10 s from `start` excluded for `quiet`; a far day for `edited`.
    start = even_after(time.time() + 5)
    end = start + 10
    far = time.time() + 86_400
    for body in (calendar("maint", start, end), calendar("later", far, far + 3600)):
        status, answer = bed.api("POST", "/api/calendar", body)
        assert status == 201, answer
    for name, calendars in (("quiet", ["maint"]), ("edited", ["later"])):
        status, answer = bed.api("POST", "/api/job/register", job(name, calendars))
        assert status == 204, answer
    # The preview skips the window: what will really run.
    status, preview = bed.api("GET", "/api/job/quiet/next-fire-times?count=10")
    assert status == 200, preview
    shown = [datetime.fromisoformat(t).timestamp() for t in preview["nextFireTimes"]]
    assert shown and not [t for t in shown if start <= t < end]
    assert end in shown and start - 2 in shown
    assert preview["excludeCalendars"] == ["maint"] and preview["excludedFires"] == 5

    # When the window opens, `edited`'s calendar is changed to exclude its next 6 s.
    wait_for(lambda: time.time() >= start, 15, message="the excluded window")
    edit_start = even_after(time.time() + 1.5)
    edit_end = edit_start + 6
    status, answer = bed.api("PUT", "/api/calendar/later", calendar("later", edit_start, edit_end))
    assert status == 200, answer

    # Then: both run again after their windows ...
    wait_for(
        lambda: (
            any(f >= end for f in bed.fires_run("quiet"))
            and any(f >= edit_end for f in bed.fires_run("edited"))
        ),
        40,
        message="runs after the excluded windows",
    )
    quiet, edited = bed.fires_run("quiet"), bed.fires_run("edited")
    # ... ran before them, and ran nothing in them.
    assert any(f < start for f in quiet) and any(f < edit_start for f in edited)
    assert [f for f in quiet if start <= f < end] == []
    assert [f for f in edited if edit_start <= f < edit_end] == []
    # Each skip recorded: a trace row per excluded fire naming the calendar, and the counts.
    rows = wait_for(
        lambda: bed.excluded_rows_if("quiet", 5),
        10,
        message="the quiet job's fire_excluded rows",
    )
    assert len(rows) == 5
    assert all("excluded: calendar maint: excludeRanges[0]" in r["message"] for r in rows)
    edited_rows = wait_for(
        lambda: bed.excluded_rows_if("edited", 3),
        10,
        message="the edited job's fire_excluded rows",
    )
    assert len(edited_rows) == 3
    assert all("calendar later" in r["message"] for r in edited_rows)
    leader = bed.system.leader()
    assert leader is not None
    metrics = leader.metrics()
    assert metrics['ejc_job_fires_skipped_total{job_name="quiet",outcome="excluded"}'] == 5
    assert metrics['ejc_job_fires_skipped_total{job_name="edited",outcome="excluded"}'] == 3
    assert metrics["ejc_fires_excluded_total"] == 8
    # The runs view lists each excluded fire among the runs, with result fire_excluded (the
    # job disabled first, and its last run ended, so that the pages below hold still).
    assert bed.api("POST", "/api/job/quiet/disable")[0] == 204
    wait_for(
        lambda: not [t for t in bed.system.running() if t["metaInfo"]["jobName"] == "quiet"],
        10,
        message="no run of quiet",
    )

    def all_listed() -> list[dict[str, Any]] | None:
        """The runs view once it holds every run that started and the 5 excluded fires (the
        trace is written behind the events)."""
        status, listed = bed.api("GET", "/api/job/quiet/runs?limit=200")
        assert status == 200, listed
        entries: list[dict[str, Any]] = listed["runs"]
        return entries if len(entries) == len(bed.fires_run("quiet")) + 5 else None

    entries = wait_for(all_listed, 10, message="the runs view complete")
    excluded = [r for r in entries if r["result"] == "fire_excluded"]
    assert len(excluded) == 5 and all(r["taskId"] is None for r in excluded)
    fired = sorted(datetime.fromisoformat(r["fireTime"]).timestamp() for r in excluded)
    assert fired == [start + 2 * k for k in range(5)]
    assert all("calendar maint" in r["reason"] for r in excluded)
    # A page that ends on an excluded fire goes on from its time.
    cut = entries.index(excluded[0]) + 1
    status, page = bed.api("GET", f"/api/job/quiet/runs?limit={cut}")
    assert status == 200 and page["runs"] == entries[:cut] and page["next"]
    status, rest = bed.api("GET", f"/api/job/quiet/runs?limit=200&before={page['next']}")
    assert status == 200, rest
    assert rest["runs"] == entries[cut:]
