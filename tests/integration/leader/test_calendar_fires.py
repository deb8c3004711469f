"""Calendars take effect on fires (issue 28), over a real ZooKeeper and the term's real
calendar store: the producer's and the workflow engine's cron fires in an excluded period add
no run, move the record past them (so a second accounting, as a new leader's, finds nothing)
and are reported as `fire_excluded` events naming the calendar and its part; an edit of the
calendar applies from the next accounting on; a calendar that does not exist is ignored."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.leader.producer import Producer
from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.calendar import Calendar
from scheduler.model.config import JobConfig
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import InvalidRequest
from scheduler.model.fires import due_fires
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.workflow import WorkflowConfig, WorkflowNode
from scheduler.storage.layout import LAST_FIRE
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter
from scheduler.storage.workflow_store import WorkflowQueue, WorkflowStore
from tests.support.bodies import job_config

CRON = "0/2 * * * * ?"


class Acting:
    acting = True


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def calendar(name: str, start: float, end: float) -> Calendar:
    body = {"calendarName": name, "excludeRanges": [{"from": iso(start), "to": iso(end)}]}
    return Calendar.from_json(body, default_time_zone="UTC")


def job(**changes: Any) -> JobConfig:
    return job_config("tick", job_type="SIMPLE", strict=False, **{"cron": CRON, **changes})


def producer(stores: TermStores, queues: QueueCache) -> tuple[Producer, list[JobEvent]]:
    made = Producer(stores, Acting(), lambda: None, 100, queues, calendars=stores.calendars)
    events: list[JobEvent] = []
    made.event_listeners.append(events.append)
    return made, events


def pending(stores: TermStores) -> int:
    return int(stores.registry.get("/state/ready/tick") or b"0")


def even_seconds(after: float, until: float) -> int:
    """How many fires of CRON (every even second) fall in (after, until]."""
    return int(until // 2) - int(after // 2)


def recorded(stores: TermStores) -> float:
    return float(stores.registry.get(f"{LAST_FIRE}/tick") or b"0")


@pytest.mark.parametrize("misfire", [True, False])
def test_a_catch_up_skips_excluded_past_fires_and_records_them_once(
    stores: TermStores, queues: QueueCache, misfire: bool
) -> None:
    now = time.time()
    stores.calendars.save(calendar("maint", now - 60, now + 60), create=True)
    stores.registry.put(f"{LAST_FIRE}/tick", f"{now - 11:.3f}".encode())
    made, events = producer(stores, queues)
    made.schedule(job(misfire=misfire, excludeCalendars=["maint"]), catch_up=True)
    assert pending(stores) == 0 and made.fires == 0
    assert [e.kind for e in events] == [JobEventKind.FIRE_EXCLUDED]
    assert events[0].fires in (5, 6) and events[0].webhook_url is None
    assert "excluded: calendar maint: excludeRanges[0]" in events[0].reason
    # The record moved past them: a new leader accounting from it finds nothing more.
    first_record = recorded(stores)
    assert first_record > now - 3
    again, more = producer(stores, queues)
    before = time.time()
    again.schedule(job(misfire=misfire, excludeCalendars=["maint"]), catch_up=True)
    after = time.time()
    # None of those fires again: only the even seconds that came after the record (none when
    # the two accountings fall in the same two seconds; more on a loaded machine).
    assert pending(stores) == 0
    assert all(e.kind is JobEventKind.FIRE_EXCLUDED for e in more)
    again_fires = sum(e.fires or 0 for e in more)
    assert even_seconds(first_record, before) <= again_fires <= even_seconds(first_record, after)


def test_fires_outside_the_calendar_run_and_an_edit_applies_at_the_next_accounting(
    stores: TermStores, queues: QueueCache
) -> None:
    now = time.time()
    # Excludes only the distant future: the missed fires all run.
    stores.calendars.save(calendar("maint", now + 3600, now + 7200), create=True)
    made, events = producer(stores, queues)
    configured = job(misfire=True, excludeCalendars=["maint"])
    stores.registry.put(f"{LAST_FIRE}/tick", f"{now - 7:.3f}".encode())
    made.schedule(configured, catch_up=True)
    assert pending(stores) in (3, 4) and events == []
    queued = pending(stores)
    # The calendar now covers the next minute: the next accounting (here of the next 10 s,
    # from the same record) excludes those fires.
    stores.calendars.save(calendar("maint", now - 60, now + 60), create=False)
    trigger = configured.cron_spec.trigger()
    fell = len(due_fires(trigger, recorded(stores), now + 10).times)
    made._account(configured, trigger, now + 10, on_time_from=None)
    assert pending(stores) == queued and fell >= 4
    assert [(e.kind, e.fires) for e in events] == [(JobEventKind.FIRE_EXCLUDED, fell)]
    assert recorded(stores) == pytest.approx(float(int(now + 10) // 2 * 2))


def test_a_calendar_that_does_not_exist_is_ignored_with_one_warning(
    stores: TermStores, queues: QueueCache, caplog: pytest.LogCaptureFixture
) -> None:
    made, events = producer(stores, queues)
    configured = job(misfire=True, excludeCalendars=["gone"])
    caplog.set_level(logging.WARNING, "scheduler.leader.producer")
    stores.registry.put(f"{LAST_FIRE}/tick", f"{time.time() - 5:.3f}".encode())
    made.schedule(configured, catch_up=True)
    made._account(configured, configured.cron_spec.trigger(), time.time() + 6, on_time_from=None)
    assert pending(stores) >= 4 and events == []
    warned = [r for r in caplog.records if "calendar gone" in r.getMessage()]
    assert len(warned) == 1 and "does not exist; ignored" in warned[0].getMessage()


def _workflow_engine(stores: TermStores) -> tuple[WorkflowEngine, list[JobEvent]]:
    store = WorkflowStore(stores.registry, stores.fence, "UTC", 200)
    engine = WorkflowEngine(
        store, stores, Acting(), WorkflowQueue(), lambda _t: True, calendars=stores.calendars
    )
    events: list[JobEvent] = []
    engine.event_listeners.append(events.append)
    return engine, events


def _job_of_nodes(stores: TermStores) -> None:
    app = b'{"appName":"app","appURL":"http://example.invalid/a.tgz","bootstrapScript":"true"}'
    stores.registry.create("/config/app/app", app)
    body = (
        b'{"jobName":"ja","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT",'
        b'"scriptCommandLine":"true","cron":"","shardingTotalCount":1,"cpuCount":0.1,'
        b'"memoryMB":16}'
    )
    stores.registry.create("/config/job/ja", body)


@pytest.mark.parametrize("misfire", [True, False])
def test_a_workflow_skips_excluded_fires_and_runs_the_allowed_ones(
    stores: TermStores, misfire: bool
) -> None:
    _job_of_nodes(stores)
    engine, events = _workflow_engine(stores)
    store = engine.store
    now = float(int(time.time()))
    # Fires every second; the 20 s before `now - 2` are excluded, the last 3 are not.
    stores.calendars.save(calendar("maint", now - 22, now - 2), create=True)
    config = WorkflowConfig(
        "wf",
        "app",
        (WorkflowNode("a", "ja"),),
        cron="* * * * * ?",
        misfire=misfire,
        overlap_policy=OverlapPolicy.ALLOW,
        exclude_calendars=("maint",),
    )
    store.save(config, create=True)
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("record", [store.last_fire_op("wf", now - 23, -1)])
    engine._fire_crons(now)
    runs = sorted(store.run_ids("wf"))
    kept = (2, 1, 0) if misfire else (0,)
    assert runs == [f"wf@{int((now - k) * 1000):013d}" for k in kept]
    assert [e.kind for e in events] == [JobEventKind.FIRE_EXCLUDED]
    assert events[0].fires == 20 and events[0].job_name == "wf"
    assert "calendar maint: excludeRanges[0]" in events[0].reason
    # Accounted once: again at the same moment, nothing more.
    engine._fire_crons(now)
    assert sorted(store.run_ids("wf")) == runs and len(events) == 1


def test_a_workflow_under_misfire_off_whose_newest_fire_is_excluded_makes_no_run(
    stores: TermStores,
) -> None:
    _job_of_nodes(stores)
    engine, events = _workflow_engine(stores)
    store = engine.store
    now = float(int(time.time()))
    stores.calendars.save(calendar("maint", now - 1, now + 60), create=True)
    config = WorkflowConfig(
        "wf", "app", (WorkflowNode("a", "ja"),), cron="* * * * * ?", exclude_calendars=("maint",)
    )
    store.save(config, create=True)
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("record", [store.last_fire_op("wf", now - 5, -1)])
    engine._fire_crons(now)
    assert store.run_ids("wf") == []
    assert [e.kind for e in events] == [JobEventKind.FIRE_EXCLUDED]
    assert store.last_fire("wf")[0] == now


def test_a_workflow_whose_calendar_is_missing_runs_its_fires_with_one_warning(
    stores: TermStores, caplog: pytest.LogCaptureFixture
) -> None:
    _job_of_nodes(stores)
    engine, events = _workflow_engine(stores)
    store = engine.store
    now = float(int(time.time()))
    config = WorkflowConfig(
        "wf",
        "app",
        (WorkflowNode("a", "ja"),),
        cron="* * * * * ?",
        misfire=True,
        overlap_policy=OverlapPolicy.ALLOW,
        exclude_calendars=("gone",),
    )
    store.save(config, create=True)  # as if the calendar were deleted by a writer of old
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("record", [store.last_fire_op("wf", now - 3, -1)])
    caplog.set_level(logging.WARNING, "scheduler.leader.workflows.engine")
    engine._fire_crons(now)
    engine._fire_crons(now + 1)
    assert len(store.run_ids("wf")) == 4 and events == []
    warned = [r for r in caplog.records if "'gone'" in r.getMessage()]
    assert len(warned) == 1 and "do not exist" in warned[0].getMessage()


def test_a_workflow_naming_an_unknown_calendar_is_refused() -> None:
    body = {
        "workflowName": "wf",
        "appName": "app",
        "nodes": [{"name": "a", "job": "ja"}],
        "excludeCalendars": ["maint", "gone"],
    }
    with pytest.raises(InvalidRequest) as refused:
        WorkflowConfig.from_json(
            body, max_nodes=10, default_time_zone="UTC", calendar_exists=lambda n: n == "maint"
        )
    assert "gone" in refused.value.fields["excludeCalendars"]
    read = WorkflowConfig.from_json(
        body, max_nodes=10, default_time_zone="UTC", calendar_exists=lambda _n: True
    )
    assert read.exclude_calendars == ("maint", "gone")
    assert read.to_json()["excludeCalendars"] == ["maint", "gone"]
    again = WorkflowConfig.from_json(read.to_json(), max_nodes=10, default_time_zone="UTC")
    assert again == read


def test_excluded_fires_are_logged_at_info_at_most_every_10_s_a_job(
    stores: TermStores, queues: QueueCache, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    stores.calendars.save(calendar("maint", now - 60, now + 600), create=True)
    made, events = producer(stores, queues)
    configured = job(misfire=True, excludeCalendars=["maint"])
    trigger = configured.cron_spec.trigger()
    caplog.set_level(logging.INFO, "scheduler.leader.producer")
    stores.registry.put(f"{LAST_FIRE}/tick", f"{now - 5:.3f}".encode())
    made.schedule(configured, catch_up=True)
    # Three more accountings within the 10 s: events for each, one log line for all.
    for ahead in (10, 20, 30):
        made._account(configured, trigger, now + ahead, on_time_from=None)
    assert len(events) == 4 and all(e.kind is JobEventKind.FIRE_EXCLUDED for e in events)
    lines = [r for r in caplog.records if "excluded: calendar maint" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
