"""A backfill's state (issue 28): its fires, how far it got, and the transitions between its
statuses, with the JSON stored for it (camelCase) and read back.

Statuses: RUNNING (fires launch, paced), PAUSED (none launch until resumed), CANCELLED and DONE
(both final, `ended_at` set). `next_index` counts the fires launched: `fire_times[:next_index]`
have launched, in order, and `fire_times[next_index]` is the next one. Each transition returns a
new `Backfill` (the type is frozen) or raises Conflict (409) for an impossible one:

- `pause()`: RUNNING -> PAUSED; PAUSED stays PAUSED (a retried request is harmless);
  CANCELLED or DONE: Conflict.
- `resume()`: PAUSED -> RUNNING; RUNNING stays RUNNING; CANCELLED or DONE: Conflict.
- `cancel(at)`: RUNNING or PAUSED -> CANCELLED (`ended_at = at`); CANCELLED stays as it was;
  DONE: Conflict (every fire launched already; its runs are the job's to kill).
- `fire_launched(index, at)`: only while RUNNING and only for `index == next_index` (so a fire
  is launched once even if two leaders race or a step is replayed: the store writes the new
  state with compare-and-set); `next_index + 1`, `last_launched_at = at`; after the last fire,
  DONE with `ended_at = at`. Anything else: Conflict naming the status or the expected index.

`from_json` reads what `to_json` wrote and refuses anything else with InvalidRequest naming each
bad field (stored data is checked as input is: a damaged node must not launch odd fires).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timezone
from enum import StrEnum
from typing import TypeVar

from scheduler.model.backfill.fire_list import (
    MAX_BACKFILL_FIRES_LIMIT,
    FireList,
    next_launch_at,
)
from scheduler.model.backfill.request import (
    MAX_FIRES_PER_MINUTE,
    MIN_FIRES_PER_MINUTE,
    BackfillRequest,
    parse_time,
)
from scheduler.model.config import _wire
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import Conflict, InvalidRequest

__all__ = [
    "FIRE_TIMES_SHOWN",
    "STATE_FIELDS",
    "Backfill",
    "BackfillStatus",
    "backfill_id_problem",
    "fire_time_text",
    "new_backfill_id",
    "preview_json",
]

FIRE_TIMES_SHOWN = 100
"""How many fire times an answer lists (the contract's "the first 100")."""
STATE_FIELDS = (
    "backfillId",
    "jobName",
    "from",
    "to",
    "status",
    "fireTimes",
    "nextIndex",
    "excludedFires",
    "firesPerMinute",
    "overlapPolicy",
    "createdAt",
    "lastLaunchedAt",
    "endedAt",
)
_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
_TOKEN = re.compile(r"[0-9a-f]{8}")
_E = TypeVar("_E", bound=StrEnum)


class BackfillStatus(StrEnum):
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    DONE = "DONE"

    @property
    def final(self) -> bool:
        return self in (BackfillStatus.CANCELLED, BackfillStatus.DONE)


_LAUNCHING = (BackfillStatus.RUNNING, BackfillStatus.PAUSED)


def new_backfill_id(created_at: datetime, token: str) -> str:
    """`20261126T210500Z-1f2e3d4c`: the creation time in UTC (ids sort by it, as a ZooKeeper
    child list is read) and 8 lowercase hex digits the caller draws (`secrets.token_hex(4)`),
    so two backfills of one second differ. ValueError for a naive time or a bad token."""
    if created_at.tzinfo is None or created_at.utcoffset() is None:
        raise ValueError("created_at must be timezone-aware")
    if not _TOKEN.fullmatch(token):
        raise ValueError("token must be 8 lowercase hex digits")
    return f"{created_at.astimezone(UTC):%Y%m%dT%H%M%SZ}-{token}"


def backfill_id_problem(text: str) -> str | None:
    """Why `text` (from a URL) is not a backfill id, or None: checked before it reaches a path."""
    if len(text) > 40 or not _ID.fullmatch(text):
        return "is not a backfill id (such as 20261126T210500Z-1f2e3d4c)"
    return None


def fire_time_text(fire: datetime) -> str:
    """A fire time as the API, the store and the runs' `fireTime` write it: ISO 8601 with its
    zone's offset, whole seconds (cron fires are), such as `2026-11-23T00:00:00+01:00`."""
    return fire.isoformat(timespec="seconds")


def preview_json(fires: FireList) -> dict[str, object]:
    """A dry run's answer: `{"backfillId": null, "dryRun": true, "fires": N, "excludedFires": E,
    "fireTimes": [the first FIRE_TIMES_SHOWN]}`."""
    return {
        "backfillId": None,
        "dryRun": True,
        "fires": len(fires.times),
        "excludedFires": fires.excluded,
        "fireTimes": [fire_time_text(fire) for fire in fires.times[:FIRE_TIMES_SHOWN]],
    }


@dataclass(frozen=True)
class Backfill:
    """One backfill of one job. Times are aware; `fire_times` ascending, distinct, non-empty,
    each with a fixed offset (the one its zone had at that instant, as stored and as the runs'
    `fireTime` carries it)."""

    backfill_id: str
    job_name: str
    start: datetime
    end: datetime
    status: BackfillStatus
    fire_times: tuple[datetime, ...]
    next_index: int
    excluded_fires: int
    fires_per_minute: float | None
    overlap_policy: OverlapPolicy | None
    created_at: datetime
    last_launched_at: datetime | None = None
    ended_at: datetime | None = None

    @classmethod
    def start_new(
        cls,
        backfill_id: str,
        job_name: str,
        request: BackfillRequest,
        fires: FireList,
        created_at: datetime,
    ) -> Backfill:
        """A RUNNING backfill of `fires` (from `backfill_fires`) for a checked request.

        Raises InvalidRequest (fields `from` and `to`) when the range holds no fire to run, and
        ValueError for a bad id or job name (the caller made them) or a naive `created_at`.
        """
        if (problem := backfill_id_problem(backfill_id)) is not None:
            raise ValueError(f"backfill id {backfill_id!r} {problem}")
        if (problem := _wire.name_problem(job_name)) is not None:
            raise ValueError(f"job name {job_name!r} {problem}")
        if created_at.tzinfo is None or created_at.utcoffset() is None:
            raise ValueError("created_at must be timezone-aware")
        if not fires.times:
            why = "the range holds no fire to run"
            if fires.excluded:
                why += f" ({fires.excluded} fires in it are excluded by the job's calendars)"
            raise InvalidRequest(
                f"invalid backfill request: {why}", fields={"from": why, "to": why}
            )
        return cls(
            backfill_id=backfill_id,
            job_name=job_name,
            start=request.start,
            end=request.end,
            status=BackfillStatus.RUNNING,
            fire_times=tuple(_fixed(fire) for fire in fires.times),
            next_index=0,
            excluded_fires=fires.excluded,
            fires_per_minute=request.fires_per_minute,
            overlap_policy=request.overlap_policy,
            created_at=created_at,
        )

    @property
    def fires(self) -> int:
        return len(self.fire_times)

    @property
    def next_fire(self) -> datetime | None:
        """The next fire to launch, or None when all have launched."""
        return self.fire_times[self.next_index] if self.next_index < self.fires else None

    def due_at(self, now: datetime) -> datetime | None:
        """When the next fire may launch (`next_launch_at` of the rate and the last launch), or
        None when none will: not RUNNING, or nothing left."""
        if self.status is not BackfillStatus.RUNNING or self.next_fire is None:
            return None
        return next_launch_at(self.fires_per_minute, self.last_launched_at, now)

    def pause(self) -> Backfill:
        self._refuse_final("pause")
        return replace(self, status=BackfillStatus.PAUSED)

    def resume(self) -> Backfill:
        self._refuse_final("resume")
        return replace(self, status=BackfillStatus.RUNNING)

    def cancel(self, at: datetime) -> Backfill:
        if self.status is BackfillStatus.CANCELLED:
            return self
        self._refuse_final("cancel")
        return replace(self, status=BackfillStatus.CANCELLED, ended_at=_aware(at, "at"))

    def fire_launched(self, index: int, at: datetime) -> Backfill:
        """The state after fire `index` launched at `at`; Conflict unless RUNNING with
        `index == next_index`."""
        _aware(at, "at")
        if self.status is not BackfillStatus.RUNNING:
            raise Conflict(
                f"backfill {self.backfill_id} of job {self.job_name} is {self.status}: "
                "no fire of it may launch"
            )
        if index != self.next_index:
            raise Conflict(
                f"backfill {self.backfill_id} of job {self.job_name}: fire {index} cannot launch, "
                f"the next one is fire {self.next_index} of {self.fires}"
            )
        launched = self.next_index + 1
        if launched == self.fires:
            return replace(
                self,
                next_index=launched,
                last_launched_at=at,
                status=BackfillStatus.DONE,
                ended_at=at,
            )
        return replace(self, next_index=launched, last_launched_at=at)

    def _refuse_final(self, action: str) -> None:
        if self.status.final:
            raise Conflict(
                f"backfill {self.backfill_id} of job {self.job_name} is {self.status}: "
                f"it cannot {action}"
            )

    def to_json(self) -> dict[str, object]:
        """The stored form: every STATE_FIELDS key, in that order (nulls included)."""
        return {
            "backfillId": self.backfill_id,
            "jobName": self.job_name,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "status": self.status.value,
            "fireTimes": [fire_time_text(fire) for fire in self.fire_times],
            "nextIndex": self.next_index,
            "excludedFires": self.excluded_fires,
            "firesPerMinute": self.fires_per_minute,
            "overlapPolicy": None if self.overlap_policy is None else self.overlap_policy.value,
            "createdAt": _instant(self.created_at),
            "lastLaunchedAt": _instant(self.last_launched_at),
            "endedAt": _instant(self.ended_at),
        }

    def summary_json(self) -> dict[str, object]:
        """The API's view (`GET /api/job/{job}/backfills`, the POST's answer): the stored form
        with `fires` (the count) and only the first FIRE_TIMES_SHOWN fire times, plus
        `launched` and `nextFireTime`."""
        body = self.to_json()
        body["fires"] = self.fires
        body["fireTimes"] = [fire_time_text(fire) for fire in self.fire_times[:FIRE_TIMES_SHOWN]]
        body["launched"] = self.next_index
        body["nextFireTime"] = None if self.next_fire is None else fire_time_text(self.next_fire)
        return body

    @classmethod
    def from_json(cls, data: object) -> Backfill:
        """Read a stored backfill; InvalidRequest naming each bad field (see module docstring)."""
        body: Mapping[str, object] = _wire.require_object(data, "stored backfill")
        problems: dict[str, str] = {}
        for key in body:
            if key not in STATE_FIELDS:
                problems[_wire.field_label(str(key))] = "is not a backfill field"
        reader = _Reader(body, problems)
        backfill_id = reader.text("backfillId")
        if backfill_id is not None and (problem := backfill_id_problem(backfill_id)):
            problems["backfillId"] = problem
        job_name = reader.text("jobName")
        if job_name is not None and (problem := _wire.name_problem(job_name)):
            problems["jobName"] = problem
        start = reader.time("from")
        end = reader.time("to")
        status = reader.choice("status", BackfillStatus)
        fires = reader.fire_times()
        next_index = reader.count("nextIndex", MAX_BACKFILL_FIRES_LIMIT)
        if next_index is not None and fires is not None and next_index > len(fires):
            problems["nextIndex"] = f"must be at most the number of fires ({len(fires)})"
        excluded = reader.count("excludedFires", MAX_BACKFILL_FIRES_LIMIT * 10)
        rate = reader.rate()
        policy = reader.choice("overlapPolicy", OverlapPolicy, optional=True)
        created = reader.time("createdAt")
        last = reader.time("lastLaunchedAt", optional=True)
        ended = reader.time("endedAt", optional=True)
        if status is not None and status.final and ended is None and "endedAt" not in problems:
            problems["endedAt"] = f"is required when the status is {status}"
        if status is not None and not status.final and ended is not None:
            problems["endedAt"] = f"must be null while the status is {status}"
        if status is not None and fires is not None and next_index is not None:
            if status is BackfillStatus.DONE and next_index != len(fires):
                problems.setdefault("nextIndex", "must equal the number of fires when DONE")
            if status in _LAUNCHING and next_index == len(fires):
                problems.setdefault("nextIndex", f"must be below the number of fires when {status}")
        if problems:
            raise _wire.invalid("stored backfill", problems)
        assert backfill_id is not None and job_name is not None and start is not None
        assert end is not None and status is not None and fires is not None
        assert next_index is not None and excluded is not None and created is not None
        return cls(
            backfill_id,
            job_name,
            start,
            end,
            status,
            fires,
            next_index,
            excluded,
            rate,
            policy,
            created,
            last,
            ended,
        )


def _fixed(fire: datetime) -> datetime:
    """`fire` with its offset as a fixed zone, as `from_json` reads it back. A ZoneInfo time of
    a repeated autumn hour (fold 1) is never equal to a time of another zone (PEP 495), so a
    backfill kept in the job's zone would not equal its own stored copy."""
    offset = fire.utcoffset()
    assert offset is not None
    return fire.replace(tzinfo=timezone(offset), fold=0)


def _aware(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return moment


def _instant(moment: datetime | None) -> str | None:
    """A bookkeeping time in UTC with milliseconds, as the job events write times."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")


class _Reader:
    """Strict reads of the stored form's fields, each problem recorded under its key."""

    def __init__(self, body: Mapping[str, object], problems: dict[str, str]) -> None:
        self._body = body
        self._problems = problems

    def _get(self, key: str, *, optional: bool) -> object:
        value = self._body.get(key)
        if value is None and not optional:
            self._problems[key] = "is required"
        return value

    def text(self, key: str) -> str | None:
        value = self._get(key, optional=False)
        if value is None:
            return None
        if not isinstance(value, str):
            self._problems[key] = "must be a string"
            return None
        return value

    def time(self, key: str, *, optional: bool = False) -> datetime | None:
        value = self._get(key, optional=optional)
        if value is None:
            return None
        if not isinstance(value, str):
            self._problems[key] = "must be a string"
            return None
        try:
            return parse_time(value)
        except ValueError as exc:
            self._problems[key] = str(exc)
            return None

    def count(self, key: str, limit: int) -> int | None:
        value = self._get(key, optional=False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            self._problems[key] = f"must be an integer between 0 and {limit}"
            return None
        return value

    def rate(self) -> float | None:
        value = self._body.get("firesPerMinute")
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not MIN_FIRES_PER_MINUTE <= value <= MAX_FIRES_PER_MINUTE
        ):
            self._problems["firesPerMinute"] = (
                f"must be a number between {MIN_FIRES_PER_MINUTE} and {MAX_FIRES_PER_MINUTE:g}"
            )
            return None
        return float(value)

    def choice(self, key: str, kind: type[_E], *, optional: bool = False) -> _E | None:
        value = self._get(key, optional=optional)
        if value is None:
            return None
        for member in kind:
            if member.value == value:
                return member
        choices = ", ".join(member.value for member in kind)
        self._problems[key] = f"must be one of {choices}"
        return None

    def fire_times(self) -> tuple[datetime, ...] | None:
        value = self._get("fireTimes", optional=False)
        if value is None:
            return None
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_BACKFILL_FIRES_LIMIT:
            self._problems["fireTimes"] = (
                f"must be a list of 1 to {MAX_BACKFILL_FIRES_LIMIT} ISO 8601 times"
            )
            return None
        fires: list[datetime] = []
        for index, item in enumerate(value):
            try:
                if not isinstance(item, str):
                    raise ValueError("must be a string")
                fire = parse_time(item)
            except ValueError as exc:
                self._problems["fireTimes"] = f"item {index}: {exc}"
                return None
            if fires and fire <= fires[-1]:
                self._problems["fireTimes"] = f"item {index}: not after the one before it"
                return None
            fires.append(fire)
        return tuple(fires)
