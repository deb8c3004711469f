"""A job's concurrency pool fields (issue 28): `pool` and `poolSlots`, optional, absent = no pool.

- `pool`: the name of the pool whose slots the job's tasks take (a pool name follows the app
  and job name rule: it becomes a ZooKeeper node and a metric label). Absent, null or `""`
  (what a form sends for "none"): the job is in no pool and its runs never wait for one.
- `poolSlots` (1 to MAX_POOL_SLOTS, default 1): how many of the pool's slots one of the job's
  shards (one Mesos task) takes while it runs. Given without a `pool`, it is refused (it would
  mean nothing): a client that takes a job out of its pool nulls both.

These live in `model/config/` beside the run policies, not in `model/pools.py`, so that
`job.py` can read them without an import cycle (`pools.py` imports this module for the name
rule and bounds). Whether the named pool exists and is large enough for one run of the job is
for the caller to ask (`pools.fit_problem`): this module knows no pool.

Every problem is recorded on the `FieldReader` under its field's name (`pool`, `poolSlots`), so
the job's one InvalidRequest (400) names it with the job's other bad fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.model.config import _wire

__all__ = [
    "MAX_POOL_SLOTS",
    "POOL_FIELDS",
    "POOL_LIMITS",
    "JobPool",
    "pool_name_problem",
    "read_job_pool",
]

MAX_POOL_SLOTS = 1000
"""A shard taking more than this is a typo; pools are at most `pools.MAX_POOL_SIZE` slots."""
POOL_FIELDS = ("pool", "poolSlots")
POOL_LIMITS = {"pool": _wire.NAME_MAX_LENGTH * 4}
"""UTF-8 bytes of a `pool` string (the name rule then bounds it to NAME_MAX_LENGTH ASCII)."""


def pool_name_problem(name: str) -> str | None:
    """Why `name` cannot name a pool, or None: the app and job name rule (letters, digits,
    `_`, `-`, `.`, at most NAME_MAX_LENGTH characters, not starting with `-` or `.`)."""
    return _wire.name_problem(name)


@dataclass(frozen=True)
class JobPool:
    """A job's pool fields as read: `pool` None when the job is in no pool."""

    pool: str | None = None
    pool_slots: int = 1

    def to_json(self) -> dict[str, object]:
        """The fields under their JSON names; empty when the job is in no pool."""
        if self.pool is None:
            return {}
        return {"pool": self.pool, "poolSlots": self.pool_slots}

    @classmethod
    def from_json(cls, data: Mapping[str, object], *, strict: bool = True) -> JobPool:
        """Read `pool` and `poolSlots` of a job's JSON (other keys are ignored here: the job's
        own reader refuses unknown ones). Raises InvalidRequest naming each bad field."""
        reader = _wire.FieldReader(data, strict=strict, limits=POOL_LIMITS)
        result = read_job_pool(reader)
        reader.raise_if_any("job configuration")
        return result


_NO_POOL = JobPool()


def read_job_pool(reader: _wire.FieldReader) -> JobPool:
    """Read the pool fields, recording a problem per bad field in `reader`.

    Stored jobs get the same checks as new input: only this scheduler writes these fields. The
    result is meaningful only when the reader recorded no problem under POOL_FIELDS.
    """
    if not reader.present("pool") and not reader.present("poolSlots"):
        return _NO_POOL  # most jobs are in none: one frozen instance
    raw_pool = reader.optional_text("pool")
    pool: str | None = None
    if raw_pool is not None and raw_pool != "":
        if problem := pool_name_problem(raw_pool):
            reader.problem("pool", problem)
        else:
            pool = raw_pool
    slots = 1
    if reader.present("poolSlots"):
        value = reader.integer("poolSlots", 1)
        if value is not None and not 1 <= value <= MAX_POOL_SLOTS:
            reader.problem("poolSlots", f"must be between 1 and {MAX_POOL_SLOTS}")
        elif value is not None:
            slots = value
        if pool is None and reader.ok("pool") and reader.ok("poolSlots"):
            reader.problem(
                "poolSlots", "applies only to a job in a pool: set pool too, or leave it out"
            )
    return JobPool(pool, slots)
