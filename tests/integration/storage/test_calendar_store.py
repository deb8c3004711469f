"""The term's calendar store (issue 28) on a real ZooKeeper: read once, kept by its own fenced
writes, its refusals, its users, its listeners, and many threads at once."""

from __future__ import annotations

import json
import threading

import pytest

from scheduler.model.calendar import Calendar
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import Conflict, NotFound, NotLeader, QuotaExceeded
from scheduler.storage import layout
from scheduler.storage.calendar_store import CalendarStore
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence
from tests.support.bodies import job_body


def calendar(name: str, *dates: str, zone: str = "UTC") -> Calendar:
    return Calendar.from_json(
        {"calendarName": name, "excludeDates": list(dates or ["2026-12-25"]), "timeZone": zone},
        default_time_zone="UTC",
    )


def _store(registry: Registry, fence: Fence | None, max_calendars: int = 100) -> CalendarStore:
    return CalendarStore(registry, fence, "UTC", max_calendars, ConfigStore(registry, fence, "UTC"))


def _write_raw(registry: Registry, name: str, data: bytes) -> None:
    registry.ensure(layout.CALENDARS)
    registry.client.create(registry.abs(layout.calendar_path(name)), data)


def test_saved_calendars_are_stored_as_their_json_and_read_back_by_a_new_term(
    registry: Registry, fence: Fence
) -> None:
    store = _store(registry, fence)
    assert store.all() == [] and store.names() == []
    store.save(calendar("b", "2026-12-25"), create=True)
    store.save(calendar("a", "2026-01-01", zone="Europe/Berlin"), create=True)
    store.save(calendar("b", "2026-12-26"), create=False)
    stored = json.loads(registry.get(layout.calendar_path("a")) or b"")
    assert stored == calendar("a", "2026-01-01", zone="Europe/Berlin").to_json()

    later = _store(registry, None)  # the next term's store reads what this one wrote
    assert later.names() == ["a", "b"]
    assert later.get("b") == calendar("b", "2026-12-26")
    assert later.get("a") == calendar("a", "2026-01-01", zone="Europe/Berlin")
    assert later.get("c") is None


def test_the_store_reads_once_and_then_answers_from_its_copy(
    registry: Registry, fence: Fence
) -> None:
    _write_raw(registry, "a", json.dumps(calendar("a").to_json()).encode())
    store = _store(registry, fence)
    assert store.names() == ["a"]
    # Written behind its back (no leader does that): not seen, since no read follows the first.
    _write_raw(registry, "b", json.dumps(calendar("b").to_json()).encode())
    registry.delete(layout.calendar_path("a"))
    assert store.names() == ["a"]
    assert [c.calendar_name for c in store.calendars(["b", "a", "nope", "a"])] == ["a"]


def test_an_unreadable_stored_calendar_is_left_out_and_the_others_read(
    registry: Registry, fence: Fence
) -> None:
    _write_raw(registry, "good", json.dumps(calendar("good").to_json()).encode())
    _write_raw(registry, "garbage", b"\xff{not json")
    _write_raw(registry, "list", b"[1, 2]")
    _write_raw(registry, "bad", json.dumps({"calendarName": "bad"}).encode())
    _write_raw(registry, "other", json.dumps(calendar("elsewhere").to_json()).encode())
    store = _store(registry, fence)
    assert store.names() == ["good"]


def test_calendars_answers_those_that_exist_in_the_order_given(
    registry: Registry, fence: Fence
) -> None:
    store = _store(registry, fence)
    for name in ("x", "y", "z"):
        store.save(calendar(name), create=True)
    assert [c.calendar_name for c in store.calendars(["z", "missing", "x"])] == ["z", "x"]
    assert store.calendars([]) == []


def test_create_update_and_delete_refusals(registry: Registry, fence: Fence) -> None:
    store = _store(registry, fence, max_calendars=2)
    store.save(calendar("a"), create=True)
    with pytest.raises(Conflict, match="'a' already exists"):
        store.save(calendar("a", "2027-01-01"), create=True)
    with pytest.raises(NotFound, match="'b' does not exist"):
        store.save(calendar("b"), create=False)
    assert registry.get(layout.calendar_path("b")) is None
    store.save(calendar("b"), create=True)
    with pytest.raises(QuotaExceeded, match="max_calendars"):
        store.save(calendar("c"), create=True)
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert registry.get(layout.calendar_path("a")) is None
    store.save(calendar("c"), create=True)  # room again
    assert store.names() == ["b", "c"]


def test_a_deposed_leaders_store_writes_nothing_and_keeps_its_copy(
    registry: Registry, fence: Fence
) -> None:
    _store(registry, fence).save(calendar("a"), create=True)
    deposed = _store(registry, Fence(fence.node_path, lambda: False))
    with pytest.raises(NotLeader):
        deposed.save(calendar("b"), create=True)
    with pytest.raises(NotLeader):
        deposed.save(calendar("a", "2030-01-01"), create=False)
    with pytest.raises(NotLeader):
        deposed.delete("a")
    assert deposed.names() == ["a"] and deposed.get("a") == calendar("a")
    assert json.loads(registry.get(layout.calendar_path("a")) or b"") == calendar("a").to_json()
    assert registry.get(layout.calendar_path("b")) is None


def test_listeners_hear_each_change_and_one_that_fails_does_not_stop_the_others(
    registry: Registry, fence: Fence
) -> None:
    store = _store(registry, fence)
    heard: list[str] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    store.listeners.extend([broken, lambda: heard.append("x")])
    store.save(calendar("a"), create=True)
    store.save(calendar("a", "2027-01-01"), create=False)
    store.delete("a")
    store.delete("a")  # nothing changed: nobody told
    store.save(calendar("b"), create=True)
    with pytest.raises(Conflict):
        store.save(calendar("b"), create=True)  # refused: nobody told
    assert heard == ["x", "x", "x", "x"]


def test_users_are_the_jobs_and_workflows_listing_the_calendar(
    registry: Registry, fence: Fence
) -> None:
    config = ConfigStore(registry, fence, "UTC")
    store = CalendarStore(registry, fence, "UTC", 10, config)
    store.save(calendar("holidays"), create=True)
    for name, calendars in (("b", ["holidays"]), ("a", ["other", "holidays"]), ("c", [])):
        job = JobConfig.from_json(
            job_body(name, excludeCalendars=calendars), default_time_zone="UTC"
        )
        config.add_job(job)
    workflow = {"workflowName": "nightly", "excludeCalendars": ["holidays"], "nodes": []}
    registry.ensure(layout.WORKFLOWS)
    registry.client.create(
        registry.abs(layout.workflow_path("nightly")), json.dumps(workflow).encode()
    )
    registry.client.create(registry.abs(layout.workflow_path("broken")), b"\xff")
    users = store.users("holidays")
    assert users.jobs == ("a", "b") and users.workflows == ("nightly",)
    assert users.labels() == ["job 'a'", "job 'b'", "workflow 'nightly'"]
    assert not store.users("other").workflows and store.users("other").jobs == ("a",)
    assert not store.users("nobody's")


def test_many_threads_creating_at_once_never_pass_the_quota(
    registry: Registry, fence: Fence
) -> None:
    store = _store(registry, fence, max_calendars=5)
    outcomes: list[str] = []
    lock = threading.Lock()

    def create(index: int) -> None:
        try:
            store.save(calendar(f"c{index}"), create=True)
            result = "ok"
        except QuotaExceeded:
            result = "quota"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=create, args=(i,), name=f"t{i}") for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["ok"] * 5 + ["quota"] * 7
    assert len(registry.children(layout.CALENDARS)) == 5 == len(store.names())
