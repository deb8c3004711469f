"""A backfill request (issue 28): the body of `POST /api/job/{job}/backfill`, parsed and checked.

The contract (JSON, camelCase), every field but `from` and `to` optional:

    {"from": "2026-11-23T00:00:00+01:00", "to": "2026-11-24T12:00:00+01:00",
     "firesPerMinute": 30, "dryRun": false, "overlapPolicy": "FORBID"}

- `from`, `to`: ISO 8601 date-times WITH a UTC offset (`Z` or `+01:00`); a time without one is
  refused rather than guessed in some zone. At most TIME_TEXT_MAX_LENGTH characters. Both bounds
  are inclusive (a fire at exactly `from` or `to` is in the range). `from` must be before `to`,
  not before EARLIEST_FROM (1970, where crons' years start), and `to` must not be after `now`:
  a backfill replays the past, the cron itself runs the future.
- `firesPerMinute`: the launch rate, MIN_FIRES_PER_MINUTE to MAX_FIRES_PER_MINUTE (fractions
  allowed: 0.5 is one fire every 2 minutes); absent: as fast as the launcher goes, one fire
  after the other.
- `dryRun`: true to list the fires without recording anything (default false).
- `overlapPolicy`: FORBID, ALLOW or REPLACE, how one backfill fire meets the job's run still
  going (see `model/config/policies.py`); absent: the job's own policy.

Unknown fields are refused (a typo such as `firesPerMin` must not silently run at full speed).
Every problem is collected and raised as one InvalidRequest whose `fields` names each bad field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler.model.config import _wire
from scheduler.model.config.policies import OverlapPolicy

__all__ = [
    "EARLIEST_FROM",
    "MAX_FIRES_PER_MINUTE",
    "MIN_FIRES_PER_MINUTE",
    "REQUEST_FIELDS",
    "TIME_TEXT_MAX_LENGTH",
    "BackfillRequest",
    "parse_time",
]

TIME_TEXT_MAX_LENGTH = 64
MIN_FIRES_PER_MINUTE = 0.01
"""One fire every 100 minutes: 1,000 fires then take about 69 days, the slowest worth pacing."""
MAX_FIRES_PER_MINUTE = 600.0
"""Ten fires a second: past that, pacing is the launcher's own speed anyway."""
EARLIEST_FROM = datetime(1970, 1, 1, tzinfo=UTC)
REQUEST_FIELDS = ("from", "to", "firesPerMinute", "dryRun", "overlapPolicy")


@dataclass(frozen=True)
class BackfillRequest:
    """A checked backfill request. `start` and `end` are aware datetimes with the offsets the
    client wrote (compare them as instants; `end` is not after the `now` it was checked at)."""

    start: datetime
    end: datetime
    fires_per_minute: float | None = None
    dry_run: bool = False
    overlap_policy: OverlapPolicy | None = None

    @classmethod
    def from_json(cls, data: object, *, now: datetime) -> BackfillRequest:
        """Parse and check a request body (already JSON-decoded) against the aware `now`.

        Raises InvalidRequest naming every bad field (`from`, `to`, `firesPerMinute`, `dryRun`,
        `overlapPolicy`, each unknown field); ValueError for a naive `now` (a caller's bug).
        """
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("now must be timezone-aware")
        body: Mapping[str, object] = _wire.require_object(data, "backfill request")
        reader = _wire.FieldReader(
            body, strict=True, limits={"overlapPolicy": _wire.SHORT_TEXT_MAX_BYTES}
        )
        reader.refuse_unknown(REQUEST_FIELDS, "is not a backfill field")
        start = _read_time(reader, "from")
        end = _read_time(reader, "to")
        if start is not None and start < EARLIEST_FROM:
            reader.problem("from", f"must not be before {EARLIEST_FROM.isoformat()}")
        if end is not None and end > now:
            reader.problem(
                "to",
                f"must not be after now ({now.astimezone(UTC).isoformat(timespec='seconds')}):"
                " a backfill replays past fires",
            )
        if start is not None and end is not None and start >= end:
            reader.problem("from", "must be before 'to'")
            reader.problem("to", "must be after 'from'")
        rate = _read_rate(reader)
        dry_run = reader.flag("dryRun", False)
        policy = _read_policy(reader)
        reader.raise_if_any("backfill request")
        assert start is not None and end is not None
        return cls(start, end, rate, dry_run, policy)


def parse_time(text: str) -> datetime:
    """An ISO 8601 date-time with a UTC offset; ValueError saying why not (no offset, too long,
    not ISO 8601). `Z` is UTC."""
    if len(text) > TIME_TEXT_MAX_LENGTH:
        raise ValueError(f"must be at most {TIME_TEXT_MAX_LENGTH} characters")
    stripped = text.strip()
    if stripped != text or not stripped.isascii() or not stripped.isprintable():
        raise ValueError(f"must be an ISO 8601 date-time such as {_EXAMPLE!r}")
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise ValueError(
            f"must be an ISO 8601 date-time such as {_EXAMPLE!r}, not {_wire.shown(text)}"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"must carry a UTC offset ('Z' or '+01:00'), as in {_EXAMPLE!r}")
    return moment


_EXAMPLE = "2026-11-23T00:00:00+01:00"


def _read_time(reader: _wire.FieldReader, key: str) -> datetime | None:
    text = reader.required_text(key)
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        reader.problem(key, str(exc))
        return None


def _read_rate(reader: _wire.FieldReader) -> float | None:
    if not reader.present("firesPerMinute"):
        return None
    rate = reader.number("firesPerMinute")
    if rate is None:
        return None
    if not (math.isfinite(rate) and MIN_FIRES_PER_MINUTE <= rate <= MAX_FIRES_PER_MINUTE):
        reader.problem(
            "firesPerMinute",
            f"must be between {MIN_FIRES_PER_MINUTE} and {MAX_FIRES_PER_MINUTE:g}, not "
            f"{_wire.shown(reader.raw('firesPerMinute'))}",
        )
        return None
    return rate


def _read_policy(reader: _wire.FieldReader) -> OverlapPolicy | None:
    raw = reader.optional_text("overlapPolicy")
    if raw is None:
        return None
    try:
        return OverlapPolicy(raw.strip().upper())
    except ValueError:
        choices = ", ".join(policy.value for policy in OverlapPolicy)
        reader.problem("overlapPolicy", f"must be one of {choices}, not {_wire.shown(raw)}")
        return None
