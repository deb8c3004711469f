"""The live view of `./dev.sh run`: which log lines become which events."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.liveview import FollowedLog, render_line

STAMP = "2026-01-02 10:11:12,345"
TID = "demo_job@-@2@-@READY@-@m-S0@-@5f0c"


@pytest.mark.parametrize(
    ("level", "logger_message", "shown"),
    [
        (
            "INFO",
            "scheduler.replica.replica: leader: 127.0.0.1:8899 won term 4",
            "leader 127.0.0.1:8899 (term 4)",
        ),
        ("INFO", f"scheduler.mesos.status: status: {TID} finished", "finished demo_job shard 2"),
        (
            "INFO",
            f"scheduler.mesos.status: status: {TID} finished, "
            "other@-@0@-@READY@-@agent-1@-@7e1 finished",
            "finished demo_job shard 2, other shard 0",
        ),
        (
            "WARNING",
            f"scheduler.mesos.status: status: {TID} TASK_FAILED (REASON_COMMAND_EXECUTOR_FAILED) "
            "RuntimeError: boom",
            "TASK_FAILED demo_job shard 2: RuntimeError: boom",
        ),
        (
            "WARNING",
            f"scheduler.mesos.status: status: {TID} TASK_LOST () ",
            "TASK_LOST demo_job shard 2",
        ),
        (
            "WARNING",
            "scheduler.mesos.status: status: daemon run of d.job-1 shard 0 failed: ValueError: x",
            "run failed: d.job-1 shard 0: ValueError: x",
        ),
        (
            "INFO",
            "scheduler.config.listener: config-listener: job demo_job disabled; unscheduling",
            "disabled demo_job",
        ),
        (
            "INFO",
            "scheduler.config.listener: config-listener: job demo_job changed; rescheduling",
            "updated demo_job",
        ),
        ("INFO", "scheduler.api.apps: api: app demo_app disabled", "app demo_app disabled"),
        (
            "WARNING",
            f"scheduler.mesos.status: status: {TID} timed out after 3 s (TASK_KILLED)",
            "timed out after 3 s: demo_job shard 2",
        ),
        (
            "WARNING",
            "scheduler.leader.producer: producer: job demo_job: fire at 2026-01-02T10:11:10Z "
            "skipped: the job is still running (overlapPolicy FORBID)",
            "demo_job: fire at 2026-01-02T10:11:10Z skipped: the job is still running "
            "(overlapPolicy FORBID)",
        ),
        (
            "INFO",
            "scheduler.leader.producer: producer: job demo_job: 3 fires from 2026-01-02T10:11:00Z "
            "to 2026-01-02T10:11:10Z excluded: calendar 'maint' range 10:00-11:00",
            "demo_job: 3 fires from 2026-01-02T10:11:00Z to 2026-01-02T10:11:10Z excluded: "
            "calendar 'maint' range 10:00-11:00",
        ),
        (
            "WARNING",
            "scheduler.leader.producer: producer: 40 fire(s) delayed over "
            "max_fires_per_second=10 (job a...); 40 jobs wait; they still run, later",
            "40 fire(s) delayed over max_fires_per_second=10",
        ),
        (
            "INFO",
            "scheduler.replica.vouching: vouching: replica 127.0.0.1:8901 proved it belongs to "
            "this cluster",
            "replica 127.0.0.1:8901 joined",
        ),
        (
            "WARNING",
            "scheduler.replica.vouching: vouching: election member '10.0.0.9:80' is not vouched "
            "for: no proof; it gets no redirects, CORS or listing (checked again in 5 s)",
            "election member 10.0.0.9:80 NOT vouched for: no proof",
        ),
        (
            "ERROR",
            "scheduler.mesos.driver: mesos: error from the master: gone",
            "error: mesos: error from the master: gone",
        ),
    ],
)
def test_replica_log_lines_become_events(level: str, logger_message: str, shown: str) -> None:
    line = f"{STAMP} {level} [sched-x] {logger_message}"
    assert render_line(line, "replica") == ("10:11:12", shown)


def test_a_launch_round_names_each_job_and_the_agent() -> None:
    ids = " ".join([TID, TID.replace("@-@2@", "@-@0@"), "other@-@0@-@READY@-@m-S0@-@1"])
    line = (
        f"{STAMP} INFO [localmesos-http-7] deploy.localmesos.launch: "
        f"framework f-1: launched 3 task(s) on agent1.localmesos: {ids}"
    )
    assert render_line(line, "mesos") == (
        "10:11:12",
        "launched 2 tasks of demo_job, 1 task of other on agent1",
    )


@pytest.mark.parametrize(
    "line",
    [
        f"{STAMP} INFO [sched-http] scheduler.edge.http: http: serving on 127.0.0.1:8899",
        # The config listener's line is the one shown for an update.
        f"{STAMP} INFO [t] scheduler.api.jobs: api: job demo_job updated",
        "Traceback (most recent call last):",
        "",
    ],
)
def test_other_lines_are_not_events(line: str) -> None:
    assert render_line(line, "replica") is None


def test_a_followed_log_reads_whole_new_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "replica.log"
    path.write_text(f"{STAMP} INFO [t] x: api: job old registered\n")
    followed = FollowedLog.from_now("r1", path, "replica")
    assert followed.new_events() == []  # what was there before is not this run's
    with open(path, "a") as out:
        out.write(f"{STAMP} INFO [t] x: api: job a registered\n{STAMP} INFO [t] x: api: job b reg")
    assert followed.new_events() == [(STAMP, "10:11:12", "registered a")]
    with open(path, "a") as out:
        out.write("istered\n")
    assert followed.new_events() == [(STAMP, "10:11:12", "registered b")]
