"""Fire accounting on a real ZooKeeper: catch-up from the recorded last fire with misfire on and
off, the cap, a first schedule, concurrent accountants, and a deposed leader."""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

import pytest

from scheduler.leader import lifecycle
from scheduler.leader import producer as producer_module
from scheduler.leader.producer import Producer
from scheduler.model.config import JobConfig, parse_cron
from scheduler.model.errors import NotLeader
from scheduler.model.fires import due_fires
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.storage.fire_ledger import FireLedger, LedgerState, LedgerWrite
from scheduler.storage.layout import LAST_FIRE
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.bodies import job_config
from tests.support.waiting import wait_for

CRON = "0/2 * * * * ?"


class Acting:
    acting = True


def job(**changes: Any) -> JobConfig:
    return job_config("tick", job_type="SIMPLE", strict=False, **{"cron": CRON, **changes})


def producer(
    registry: Registry, fence: Fence, queues: QueueCache, cap: int = 100
) -> tuple[Producer, list[JobEvent]]:
    stores = TermStores.build(registry, fence, "UTC", cap)
    # Not started: no cron fires meanwhile.
    made = Producer(stores, Acting(), lambda: None, cap, queues)
    events: list[JobEvent] = []
    made.event_listeners.append(events.append)
    return made, events


def pending(registry: Registry) -> int:
    return int(registry.get("/state/ready/tick") or b"0")


def record(registry: Registry, when: float) -> None:
    registry.put(f"{LAST_FIRE}/tick", f"{when:.3f}".encode())


def missed_since(last: float) -> int:
    return len(due_fires(parse_cron(CRON, "UTC").trigger(), last, time.time()).times)


def test_a_job_without_a_record_starts_counting_from_now(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    made, events = producer(registry, fence, queues)
    before = time.time()
    made.schedule(job(misfire=True), catch_up=True)
    after = time.time()
    # The record is the moment of the accounting, stored rounded to the millisecond.
    recorded = float(registry.get(f"{LAST_FIRE}/tick") or b"0")
    assert round(before, 3) <= recorded <= round(after, 3)
    assert pending(registry) == 0 and events == []


def test_misfire_on_runs_every_fire_missed_since_the_record(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    last = time.time() - 11
    record(registry, last)
    made, events = producer(registry, fence, queues)
    before = time.time()
    made.schedule(job(misfire=True), catch_up=True)
    after = time.time()
    # 5 or 6 fires fell in 11 s of an every-2-s cron, each one a pending run; none reported.
    assert pending(registry) in (5, 6) and pending(registry) <= missed_since(last)
    assert events == [] and made.fires == pending(registry)
    # The record is the newest fire due when the accounting looked, some moment in
    # [before, after] (the clock read after the asserts above may be past the next fire).
    newest = float(registry.get(f"{LAST_FIRE}/tick") or b"0")
    assert newest % 2 == 0 and before - 2 < newest <= after
    # Accounting again finds nothing new: the record moved to the newest fire.
    made.schedule(job(misfire=True), catch_up=True)
    assert pending(registry) == made.fires


def test_misfire_off_skips_missed_fires_with_one_event_naming_them(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    record(registry, time.time() - 9)
    made, events = producer(registry, fence, queues)
    made.schedule(job(misfire=False, notifyWebhookUrl="http://127.0.0.1:9/h"), catch_up=True)
    assert pending(registry) == 0
    assert [(e.kind, e.job_name) for e in events] == [(JobEventKind.FIRE_SKIPPED, "tick")]
    assert events[0].fires in (4, 5) and events[0].webhook_url == "http://127.0.0.1:9/h"
    assert "skipped: missed while no leader acted, and misfire is off" in events[0].reason


def test_skipped_fires_are_logged_at_most_every_10_s_a_job_and_each_is_an_event(
    registry: Registry,
    fence: Fence,
    queues: QueueCache,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time()
    record(registry, now - 9)
    made, events = producer(registry, fence, queues)
    configured = job(misfire=False)
    trigger = configured.cron_spec.trigger()
    caplog.set_level(logging.WARNING, "scheduler.leader.producer")
    made.schedule(configured, catch_up=True)
    # Three more accountings within the 10 s (a job firing every second whose runs overlap):
    # an event for each, one WARNING line for all.
    for ahead in (10, 20, 30):
        made._account(configured, trigger, now + ahead, on_time_from=None)
    assert len(events) == 4 and {e.kind for e in events} == {JobEventKind.FIRE_SKIPPED}

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "skipped: missed" in r.getMessage()]

    assert len(lines()) == 1 and lines()[0].levelno == logging.WARNING
    # Once the interval has passed, the next line counts the fires not logged since.
    monkeypatch.setattr(producer_module, "_FIRE_EVENT_LOG_EVERY_S", 0.0)
    made._account(configured, trigger, now + 40, on_time_from=None)
    assert len(events) == 5 and len(lines()) == 2
    unlogged = sum(e.fires for e in events[1:4])
    assert f"(and {unlogged} skipped fires since the last line)" in lines()[1].getMessage()


def test_fires_beyond_the_queue_size_are_capped_and_reported(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    record(registry, time.time() - 21)
    made, events = producer(registry, fence, queues, cap=3)
    made.schedule(job(misfire=True), catch_up=True)
    assert pending(registry) == 3
    assert [e.kind for e in events] == [JobEventKind.FIRE_CAPPED]
    assert events[0].fires >= 7 and "3 runs are already pending" in events[0].reason


def test_a_changed_cron_starts_counting_again_instead_of_catching_up(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    made, _ = producer(registry, fence, queues)
    made.schedule(job(misfire=True, cron="0 0 0 1 1 ? 2099"))
    record(registry, time.time() - 30)  # as if the old cron's last fire was long ago
    made.schedule(job(misfire=True))
    assert pending(registry) == 0
    assert time.time() - float(registry.get(f"{LAST_FIRE}/tick") or b"0") < 5


def test_concurrent_accountants_count_each_fire_once(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    last = time.time() - 41
    record(registry, last)
    trigger = parse_cron(CRON, "UTC").trigger()
    now = time.time()
    ledger = FireLedger(registry, fence, 1000, queues)

    def decide(state: LedgerState) -> tuple[LedgerWrite, int] | None:
        assert state.last is not None
        due = due_fires(trigger, state.last, now)
        if due.last is None:
            return None
        return LedgerWrite(due.last, state.pending + len(due.times)), len(due.times)

    counted: list[int | None] = []
    threads = [
        threading.Thread(target=lambda: counted.append(ledger.account("tick", decide)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    expected = len(due_fires(trigger, last, now).times)
    assert pending(registry) == expected == sum(c or 0 for c in counted)


def test_a_deposed_leader_cannot_account(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    record(registry, time.time() - 9)
    deposed = Fence(fence.node_path, lambda: False)
    made, events = producer(registry, deposed, queues)
    with pytest.raises(NotLeader):
        made.schedule(job(misfire=True), catch_up=True)
    assert pending(registry) == 0 and events == []


def test_the_next_fire_is_now_while_a_fire_is_being_accounted(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    """The launcher holds its offers until a second after the next fire; a fire of 10,000 jobs
    takes longer to account, so while one is being accounted the next fire is now."""
    made, _events = producer(registry, fence, queues)
    entered, release = threading.Event(), threading.Event()

    def slow_listener(job_name: str, fire_time: float) -> None:
        entered.set()
        release.wait(30)

    made.fire_listeners.append(slow_listener)
    made.start()
    try:
        made.schedule(job(cron="0/5 * * * * ?", misfire=False), catch_up=True)
        # (The schedule's catch-up accounting is a job of its own, due at once.)
        scheduled = wait_for(
            lambda: (at := made.next_fire_at()) is not None and at > time.time() and at,
            10,
            message="the cron fire scheduled",
        )
        assert entered.wait(10), "no fire accounted"
        asked = time.time()
        during = made.next_fire_at()
        assert during is not None and scheduled <= during <= time.time()
        assert asked - scheduled < 4  # the next cron fire (5 s on) is not the answer
        release.set()
        wait_for(
            lambda: (at := made.next_fire_at()) is not None and at >= scheduled + 5,
            10,
            message="the next cron fire once the accounting ended",
        )
    finally:
        release.set()
        made.stop()


def test_a_fire_of_many_jobs_is_accounted_with_the_collector_paused(
    registry: Registry, fence: Fence, queues: QueueCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: the objects of a cron fire of thousands of jobs live until it is accounted;
    each collection meanwhile would walk them again. A fire of fewer jobs leaves the
    collector be."""
    monkeypatch.setattr(lifecycle, "PAUSE_COLLECTOR_AT", 2)
    made, _events = producer(registry, fence, queues)
    seen: list[tuple[str, bool]] = []
    made.fire_listeners.append(lambda name, _at: seen.append((name, gc.isenabled())))
    now = time.time()
    jobs = []
    for name in ("a", "b", "c"):
        registry.put(f"{LAST_FIRE}/{name}", f"{now - 5:.3f}".encode())
        jobs.append(job_config(name, job_type="SIMPLE", strict=False, cron=CRON, misfire=True))
    trigger = parse_cron(CRON, "UTC").trigger()
    made._account_fire(jobs[:2], trigger, now)  # one fire of two jobs
    made._account_fire(jobs[2:], trigger, now)  # one of a job alone on its cron
    assert {name for name, _on in seen} == {"a", "b", "c"}
    assert not any(on for name, on in seen if name in ("a", "b"))
    assert all(on for name, on in seen if name == "c")
    assert gc.isenabled()
