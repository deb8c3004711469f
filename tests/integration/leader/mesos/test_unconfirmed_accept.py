"""An ACCEPT whose answer never came: the master may have taken it. The launcher keeps its
bookkeeping (undone, the run would be launched a second time while Mesos runs the first), and
reconciliation asks about its tasks once the grace has passed: a task Mesos runs stays, one it
never got is launched again, once. The real launcher, driver, status handler and reconciler,
wired as a term wires them, against the stand-in and a real ZooKeeper."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos import launcher as launcher_module
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.offers import AcceptOutcome
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from tests.integration.leader.mesos.helpers import (
    Acting,
    FrameworkIds,
    master_tasks,
    settings_for,
    store_script_job,
    wire_launcher,
)
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for

GRACE_S = 1.5


class _FirstAnswerLost(MesosDriver):
    """The real driver, except that the answer to its first ACCEPT is lost: with `sent`, the
    ACCEPT reached the master first (it took the tasks); without, it never left."""

    def __init__(self, *args: Any, sent: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = sent
        self.accepts: list[tuple[float, list[str]]] = []  # (monotonic time, task ids)

    def accept(
        self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float
    ) -> AcceptOutcome:
        self.accepts.append((time.monotonic(), [str(t["task_id"]["value"]) for t in tasks]))
        if len(self.accepts) > 1:
            return super().accept(offer_ids, tasks, refuse_s)
        if self.sent:
            assert super().accept(offer_ids, tasks, refuse_s) is AcceptOutcome.LAUNCHED
        return AcceptOutcome.UNCONFIRMED


@dataclass
class _Term:
    driver: _FirstAnswerLost
    launcher: Launcher
    reconciler: Reconciler
    launches: list[tuple[str, str]]
    """(task id, original task id) as the launch listeners (the statistics' launch row) got
    them."""
    confirmed: list[str]
    """The task ids the launched-task listeners (the status handler's note) got."""


@pytest.fixture
def term(
    request: pytest.FixtureRequest,
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[_Term]:
    monkeypatch.setattr(launcher_module, "UNCONFIRMED_GRACE_S", GRACE_S)
    driver = _FirstAnswerLost(
        settings_for(standin, zk_namespace), FrameworkIds(), sent=request.param
    )
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    status = wire_launcher(launcher, driver, stores)
    reconciler = Reconciler(stores, driver, 0)
    # As wiring/term.py ties them.
    launcher.launching_listeners.append(status.note_launching)
    launcher.launched_task_listeners.append(status.note_launched)
    launcher.unconfirmed_listeners.append(status.note_unconfirmed)
    launcher.unconfirmed_listeners.append(reconciler.ask_later)
    status.listeners.append(reconciler.on_status)
    launches: list[tuple[str, str]] = []
    confirmed: list[str] = []
    launcher.launch_listeners.append(
        lambda round_: launches.extend((str(task), original) for task, _a, original in round_)
    )
    launcher.launched_task_listeners.append(
        lambda tasks: confirmed.extend(task.task_id for task in tasks)
    )
    launcher.start()
    reconciler.start()
    driver.start()
    try:
        yield _Term(driver, launcher, reconciler, launches, confirmed)
    finally:
        driver.stop()
        reconciler.stop()
        launcher.stop()


def _queue_run(term: _Term, stores: TermStores, tmp_path: Path, job: str) -> None:
    """One pending run of a new one-shard script job, and the launcher woken for it."""
    store_script_job(stores, tmp_path, job, "sleep 120")
    stores.ready.add_transient(job, misfire=True)
    term.launcher.wake()


def _running(standin: StandIn) -> list[dict[str, Any]] | None:
    """The master's running tasks; None while there is none."""
    return [t for t in master_tasks(standin) if t["state"] == "TASK_RUNNING"] or None


@pytest.mark.parametrize("term", [True], indirect=True)
def test_a_launch_mesos_took_whose_answer_was_lost_runs_once_and_keeps_its_bookkeeping(
    term: _Term, standin: StandIn, stores: TermStores, tmp_path: Path
) -> None:
    _queue_run(term, stores, tmp_path, "once")
    (task,) = wait_for(lambda: _running(standin), 30, message="the task running in Mesos")
    task_id = task["id"]
    [(first_at, first)] = term.driver.accepts
    assert first == [task_id]
    # The grace passes; the task's own updates have answered for it (no question needed).
    wait_for(
        lambda: time.monotonic() > first_at + GRACE_S + 2 and term.reconciler.unanswered == 0,
        GRACE_S + 20,
        message="the grace passed and the unconfirmed task answered for",
    )
    assert [t.task_id for t in stores.running.tasks("once")] == [task_id]
    assert stores.ready.counts() == {} and stores.failover.entries() == []
    assert [t["id"] for t in master_tasks(standin)] == [task_id]  # never launched again
    assert len(term.driver.accepts) == 1
    assert term.launcher.launched == 0  # not counted as a confirmed launch
    assert term.launcher.unconfirmed == 1  # /metrics: ejc_launches_unconfirmed_total
    # Its launch is recorded once (the trace's launch row), as launched; the status handler
    # was not told it was confirmed (its updates are read from its node instead).
    assert term.launches == [(task_id, task_id)]
    assert term.confirmed == []


@pytest.mark.parametrize("term", [False], indirect=True)
def test_a_launch_that_never_reached_mesos_is_launched_again_once_after_the_grace(
    term: _Term, standin: StandIn, stores: TermStores, tmp_path: Path
) -> None:
    _queue_run(term, stores, tmp_path, "lost")
    wait_for(lambda: term.driver.accepts, 30, message="the first ACCEPT")
    # A reconciliation of every task within the grace (a resubscription, say): Mesos answers
    # that it does not know the task, which is no news yet; it is asked about again after.
    term.reconciler.reconcile(True)

    (task,) = wait_for(lambda: _running(standin), GRACE_S + 30, message="the shard launched again")
    (first_at, [first]), (again_at, [again]) = term.driver.accepts
    assert task["id"] == again != first
    # Not before the grace: a slow master could still have taken the first ACCEPT.
    assert again_at - first_at >= GRACE_S
    parsed = TaskId.parse(again)
    assert (parsed.job_name, parsed.item, parsed.type) == ("lost", 0, TaskType.FAILOVER)
    assert [t.task_id for t in stores.running.tasks("lost")] == [again]
    assert [t["id"] for t in master_tasks(standin)] == [again]
    assert stores.ready.counts() == {} and stores.failover.entries() == []
    # Both launches recorded: the first (its TASK_LOST follows it in the trace), then the
    # failover launch in its place.
    assert term.launches == [(first, first), (again, first)]
    assert term.confirmed == [again]
