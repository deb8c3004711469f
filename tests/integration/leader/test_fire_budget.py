"""The fire budget (max_fires_per_second, issue 23) on a real ZooKeeper with a started producer:
fires over it are delayed, recorded, and still accounted, each once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from scheduler.leader.producer import Producer
from scheduler.model.config import JobConfig
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.storage.layout import LAST_FIRE
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.bodies import job_config
from tests.support.waiting import wait_for

CRON = "0/4 * * * * ?"
NAMES = [f"tick{n}" for n in range(5)]


class Acting:
    acting = True


def _job(name: str) -> JobConfig:
    return job_config(name, job_type="SIMPLE", cron=CRON, misfire=True, strict=False)


@pytest.fixture
def budgeted(
    registry: Registry, fence: Fence, queues: QueueCache
) -> Iterator[tuple[Producer, list[JobEvent]]]:
    stores = TermStores.build(registry, fence, "UTC", 100)
    producer = Producer(stores, Acting(), lambda: None, 100, queues, max_fires_per_second=2)
    events: list[JobEvent] = []
    producer.event_listeners.append(events.append)
    producer.start()
    yield producer, events
    producer.stop()


def _pending(registry: Registry, name: str) -> int:
    return int(registry.get(f"/state/ready/{name}") or b"0")


def _ledger(registry: Registry, name: str) -> tuple[float, int]:
    """The job's (last accounted fire, pending runs) as one consistent pair.

    The ledger writes both in one transaction, and every accounting changes the record, so a
    pending count read between two reads of the record at the same version goes with it (a
    fire may be accounted between any two reads: the producer is running).
    """
    path = registry.abs(f"{LAST_FIRE}/{name}")
    while True:
        data, before = registry.client.get(path)
        pending = _pending(registry, name)
        if registry.client.exists(path).version == before.version:
            return float(data or b"0"), pending


def test_fires_over_the_budget_are_delayed_recorded_and_still_run(
    budgeted: tuple[Producer, list[JobEvent]], registry: Registry
) -> None:
    producer, events = budgeted
    # Scheduled at least a second before a fire, so that all five wait for the same one.
    wait_for(lambda: time.time() % 4 < 2.5, 5, message="time to schedule before a fire")
    for name in NAMES:
        producer.schedule(_job(name))
    fire = (time.time() // 4 + 1) * 4
    # All five get their run of that fire, two at once and three later.
    wait_for(
        lambda: all(_pending(registry, n) == 1 for n in NAMES),
        fire - time.time() + 6,
        message="runs",
    )
    records = {n: float(registry.get(f"{LAST_FIRE}/{n}") or b"0") for n in NAMES}
    assert set(records.values()) == {fire}  # each accounted from the fire it waited with
    delayed = [e for e in events if e.kind is JobEventKind.FIRE_DELAYED and abs(e.time - fire) < 1]
    assert len(delayed) == 3 and len({e.job_name for e in delayed}) == 3
    assert "max_fires_per_second=2" in delayed[0].reason
    assert all(e.webhook_url is None for e in delayed)
    assert producer.delayed_fires >= 3
    # The delayed ones were written later: their records changed a second or more after the
    # first two (ZooKeeper's own modification times).
    written = sorted(
        registry.client.get(registry.abs(f"{LAST_FIRE}/{n}"))[1].mtime / 1000 for n in NAMES
    )
    assert written[2] - written[0] >= 0.8
    assert written[4] - written[0] >= 1.3
    # Nothing is skipped or capped on the way.
    assert not [e for e in events if e.kind is not JobEventKind.FIRE_DELAYED]


def test_without_a_budget_every_fire_is_accounted_at_once(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    stores = TermStores.build(registry, fence, "UTC", 100)
    producer = Producer(stores, Acting(), lambda: None, 100, queues)
    events: list[JobEvent] = []
    producer.event_listeners.append(events.append)
    producer.start()
    try:
        wait_for(lambda: time.time() % 4 < 2.5, 5, message="time to schedule before a fire")
        for name in NAMES:
            producer.schedule(_job(name))
        fire = (time.time() // 4 + 1) * 4
        wait_for(
            lambda: all(_pending(registry, n) == 1 for n in NAMES),
            fire - time.time() + 3,
            message="runs",
        )
        written = sorted(
            registry.client.get(registry.abs(f"{LAST_FIRE}/{n}"))[1].mtime / 1000 for n in NAMES
        )
        assert written[4] - written[0] < 0.8
        assert producer.delayed_fires == 0 and events == []
    finally:
        producer.stop()


def test_under_sustained_overload_every_fire_still_queues_a_run(
    budgeted: tuple[Producer, list[JobEvent]], registry: Registry
) -> None:
    producer, events = budgeted  # 2 fires a second for the cluster
    names = NAMES[:4]
    every_second = [
        JobConfig.from_json(
            {**_job(name).to_json(), "cron": "* * * * * ?"}, default_time_zone="UTC", strict=False
        )
        for name in names
    ]
    for job in every_second:
        producer.schedule(job)
    # Each job's fires may start before the others are scheduled: count from a consistent pair.
    started = {n: _ledger(registry, n) for n in names}
    # Four every-second jobs want 4 fires a second; the budget grants 2. Each job waits its
    # turn, then accounts every fire since its record: misfire on, each one a run.
    wait_for(lambda: producer.delayed_fires >= 12, 15, message="fires delayed for a while")
    producer.stop()
    for name in names:
        (first, pending_then), (last, pending) = started[name], _ledger(registry, name)
        fires = int(last) - int(first)  # every whole second in (first, last]
        assert fires >= 2, (name, first, last)
        assert pending - pending_then == fires, name  # none dropped, none twice
    assert {e.kind for e in events} == {JobEventKind.FIRE_DELAYED}
