"""Cron fire accounting (pure): which fire times fell since a job's last recorded fire, and what
each becomes: a pending run, a skipped fire, a capped one or an excluded one.

Every fire of a scheduled job is accounted exactly once, by the leader that records it (in the
same fenced transaction as the pending runs it adds). A fire comes on time (the cron trigger
went off) or was missed (it fell while no leader acted, or while this one was paused):

- `misfire` on: every fire adds a pending run, in order, until `job_state_queue_size` runs are
  pending; the fires beyond are capped.
- `misfire` off: a missed fire is skipped; a fire on time adds a run unless one is pending
  already, or the job still runs and its `overlapPolicy` is FORBID: then it is skipped.

A fire in a period one of the job's `excludeCalendars` excludes (issue 28) is excluded, whether
it came on time or was missed and whatever `misfire` says: it adds no run and changes nothing of
the pending ones, but it is accounted as any fire (the record moves past it) and reported as a
`fire_excluded` event naming the calendar and its part.

A gap may hold more fires than are worth listing one by one (an every-second job after a week
without a leader): at most `limit` are counted, the rest share the outcome of the last one and
the recorded fire jumps to the latest fire time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import groupby
from typing import Protocol

from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.job_events import JobEvent, JobEventKind, iso_time

__all__ = [
    "MAX_FIRES_COUNTED",
    "DueFires",
    "DueSince",
    "FireBudget",
    "FireDecision",
    "FireOutcome",
    "FirePlan",
    "Trigger",
    "due_fires",
    "fire_events",
    "plan_fires",
    "shortest_gap",
]

MAX_FIRES_COUNTED = 10_000


class Trigger(Protocol):
    """APScheduler's `CronTrigger` as used here."""

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None: ...


class FireOutcome(StrEnum):
    QUEUED = "queued"
    SKIPPED = "skipped"
    CAPPED = "capped"
    EXCLUDED = "excluded"


@dataclass(frozen=True)
class DueFires:
    """Fire times after the last recorded one, up to now (epoch seconds, ascending)."""

    times: tuple[float, ...]
    more: bool = False
    """More fires fell after the last one listed; `latest` is the newest of them."""
    latest: float | None = None

    @property
    def last(self) -> float | None:
        """The fire to record: the newest one due (None: nothing fell)."""
        if self.more and self.latest is not None:
            return self.latest
        return self.times[-1] if self.times else None


@dataclass(frozen=True)
class FireDecision:
    time: float
    outcome: FireOutcome
    reason: str = ""


@dataclass(frozen=True)
class FirePlan:
    decisions: tuple[FireDecision, ...]
    pending: int
    """Pending runs of the job once the plan is applied."""
    uncounted: FireDecision | None = None
    """The outcome of the fires beyond the counted ones (its time: the newest of them)."""

    @property
    def queued(self) -> int:
        return sum(1 for d in self.decisions if d.outcome is FireOutcome.QUEUED)


def _start_after(after: float) -> datetime:
    """The first instant the cron is asked about for fires strictly after epoch `after`: the
    next microsecond (APScheduler answers the first fire at or after a time)."""
    return datetime.fromtimestamp(after, UTC) + timedelta(microseconds=1)


def _next(trigger: Trigger, after: float) -> float | None:
    """The first fire time strictly after epoch `after`."""
    fire = trigger.get_next_fire_time(None, _start_after(after))
    return None if fire is None else fire.timestamp()


def due_fires(
    trigger: Trigger, last: float, now: float, limit: int = MAX_FIRES_COUNTED
) -> DueFires:
    """Fire times in (`last`, `now`], at most `limit` of them listed."""
    times: list[float] = []
    fire = _next(trigger, last)
    while fire is not None and fire <= now:
        if len(times) == limit:
            return DueFires(tuple(times), more=True, latest=_latest(trigger, times[-1], now))
        times.append(fire)
        fire = _next(trigger, fire)
    return DueFires(tuple(times))


class DueSince:
    """`due_fires(trigger, last, now, limit)` for the records `last` of many jobs of one cron.

    Jobs scheduled at different moments have records of their own, mostly before the same few
    fires: once the fires after the earliest record asked for are listed whole (`anchor`),
    a later record's are those of the list after it, with no cron arithmetic (a cron's next
    fire time costs about 60 µs: 60% of a 500-job fire's accounting, issue 29). A record
    earlier than the anchor is worked out and becomes the anchor."""

    def __init__(self, trigger: Trigger, now: float, limit: int = MAX_FIRES_COUNTED) -> None:
        self._trigger = trigger
        self._now = now
        self._limit = limit
        self._known: dict[float, DueFires] = {}
        self._anchor: tuple[float, DueFires] | None = None

    def __call__(self, last: float) -> DueFires:
        found = self._known.get(last)
        if found is not None:
            return found
        anchor = self._anchor
        if anchor is not None and anchor[0] <= last:
            # As `_next` asks (a record within a microsecond before a fire is past it).
            start = _start_after(last).timestamp()
            found = DueFires(tuple(t for t in anchor[1].times if t >= start))
        else:
            found = due_fires(self._trigger, last, self._now, self._limit)
            if not found.more:  # every fire in (last, now] is listed
                self._anchor = (last, found)
        self._known[last] = found
        return found


def _latest(trigger: Trigger, floor: float, now: float) -> float:
    """The newest fire time in (`floor`, `now`] (there is one), without walking from `floor`:
    look back over growing windows from `now`, then forward within the first that has one."""
    window = 1.0
    while True:
        start = max(floor, now - window)
        fire = _next(trigger, start)
        if fire is not None and fire <= now:
            break
        window *= 4
    while True:
        later = _next(trigger, fire)
        if later is None or later > now:
            return fire
        fire = later


def shortest_gap(trigger: Trigger, start: float, fires: int = 500) -> float | None:
    """The shortest time in seconds between two consecutive fires among the first `fires`
    fires after epoch `start` (None: it fires fewer than twice).

    Many consecutive gaps, not only the first: `0,1 0 * * * ?` fires 1 s apart once an hour
    and 3599 s apart the rest of the time, and which one comes first depends on the clock."""
    shortest: float | None = None
    previous = _next(trigger, start)
    for _ in range(fires - 1):
        if previous is None:
            break
        fire = _next(trigger, previous)
        if fire is None:
            break
        gap = fire - previous
        shortest = gap if shortest is None else min(shortest, gap)
        previous = fire
    return shortest


class FireBudget:
    """`max_fires_per_second` as a token bucket: a fire of one job takes one token; tokens come
    back at `per_second` a second, up to one second's worth (so a burst of that many is taken
    at once). Not thread-safe: the producer holds its lock around it."""

    def __init__(self, per_second: float, now: float) -> None:
        if per_second <= 0:
            raise ValueError("a fire budget needs a positive rate")
        self.per_second = per_second
        self.burst = max(1.0, per_second)
        self._tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
            self._at = now

    def take(self, wanted: int, now: float) -> int:
        """Take up to `wanted` tokens at `now`; how many were taken."""
        self._refill(now)
        granted = max(0, min(wanted, int(self._tokens)))
        self._tokens -= granted
        return granted

    def wait_s(self, wanted: int, now: float) -> float:
        """Seconds from `now` until `wanted` tokens (at most a burst) are there."""
        self._refill(now)
        missing = min(float(wanted), self.burst) - self._tokens
        return max(0.0, missing / self.per_second)


def plan_fires(
    due: DueFires,
    *,
    misfire: bool,
    policy: OverlapPolicy,
    pending: int,
    running: bool,
    cap: int,
    on_time_from: float | None,
    queue_full: bool = False,
    excluded: Callable[[float], str | None] | None = None,
) -> FirePlan:
    """What each due fire becomes (see the module docstring).

    `pending`: runs of the job pending now; `running`: whether tasks of it run; `cap`: the most
    pending runs (`job_state_queue_size`); `on_time_from`: fires at or after this epoch time
    came on time (None: all were missed, as at the start of a term); `queue_full`: the ready
    queue holds `cap` other jobs, so this one (with none pending) cannot join it;
    `excluded`: the reason a fire at an epoch time is excluded by the job's calendars (None: it
    is not; the predicate None: the job has no calendars).
    """
    decisions: list[FireDecision] = []

    def decide(time: float) -> FireDecision:
        nonlocal pending
        if excluded is not None and (why := excluded(time)) is not None:
            return FireDecision(time, FireOutcome.EXCLUDED, why)
        missed = on_time_from is None or time < on_time_from
        if queue_full and pending == 0 and (misfire or not missed):
            return FireDecision(
                time, FireOutcome.CAPPED, f"the ready queue holds {cap} jobs already"
            )
        if misfire:
            if pending >= cap:
                return FireDecision(
                    time,
                    FireOutcome.CAPPED,
                    f"{pending} runs are already pending, the most job_state_queue_size allows",
                )
            pending += 1
            return FireDecision(time, FireOutcome.QUEUED)
        if missed:
            return FireDecision(
                time, FireOutcome.SKIPPED, "missed while no leader acted, and misfire is off"
            )
        if pending >= 1:
            return FireDecision(
                time, FireOutcome.SKIPPED, "a run of the job is already pending, and misfire is off"
            )
        if running and policy is OverlapPolicy.FORBID:
            return FireDecision(
                time,
                FireOutcome.SKIPPED,
                "the job is still running (overlapPolicy FORBID), and misfire is off",
            )
        pending = 1
        return FireDecision(time, FireOutcome.QUEUED)

    for time in due.times:
        decisions.append(decide(time))
    uncounted = None
    if due.more and due.latest is not None:
        uncounted = decide(due.latest)
    return FirePlan(tuple(decisions), pending, uncounted)


def fire_events(job_name: str, plan: FirePlan, webhook_url: str | None) -> list[JobEvent]:
    """Skipped, capped and excluded fires as events: one per run of fires with the same outcome
    and reason (a gap of 10 missed fires is one event of 10 fires). An excluded fire is no
    failure: its event carries no webhook."""
    events: list[JobEvent] = []
    kinds = {
        FireOutcome.SKIPPED: JobEventKind.FIRE_SKIPPED,
        FireOutcome.CAPPED: JobEventKind.FIRE_CAPPED,
        FireOutcome.EXCLUDED: JobEventKind.FIRE_EXCLUDED,
    }
    for (outcome, reason), group in groupby(plan.decisions, key=lambda d: (d.outcome, d.reason)):
        if outcome is FireOutcome.QUEUED:
            continue
        fires = list(group)
        events.append(
            JobEvent(
                kinds[outcome],
                job_name,
                fires[0].time,
                _describe(fires[0].time, fires[-1].time, len(fires), outcome, reason),
                fires=len(fires),
                webhook_url=None if outcome is FireOutcome.EXCLUDED else webhook_url,
            )
        )
    extra = plan.uncounted
    if extra is not None and extra.outcome is not FireOutcome.QUEUED:
        counted = sum(1 for d in plan.decisions if d.outcome is extra.outcome)
        events.append(
            JobEvent(
                kinds[extra.outcome],
                job_name,
                extra.time,
                f"more than {counted} fires up to {iso_time(extra.time)} {extra.outcome.value} "
                f"as well (too many to count): {extra.reason}",
                fires=1,
                webhook_url=None if extra.outcome is FireOutcome.EXCLUDED else webhook_url,
            )
        )
    return events


def _describe(first: float, last: float, count: int, outcome: FireOutcome, reason: str) -> str:
    if count == 1:
        return f"fire at {iso_time(first)} {outcome.value}: {reason}"
    return f"{count} fires from {iso_time(first)} to {iso_time(last)} {outcome.value}: {reason}"
