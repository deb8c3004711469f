"""Concurrency pools (issue 28), the pure part: the pool's definition, the launcher's fair pick
and the counts; property-tested: never over a size, no job starved, the same input the same
pick."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.errors import InvalidRequest
from scheduler.model.pools import (
    MAX_POOL_SIZE,
    NeverReason,
    PoolConfig,
    PoolCounts,
    PoolPick,
    PoolTurns,
    RunningTask,
    WaitingUnit,
    fit_problem,
    pick,
    slots_in_use,
)

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def unit(
    job: str,
    second: int = 0,
    shards: int = 1,
    *,
    slots: int = 1,
    pool: str | None = "db",
    whole: bool = True,
) -> WaitingUnit:
    return WaitingUnit(
        job, T0 + timedelta(seconds=second), tuple(range(shards)), slots, pool, whole
    )


def jobs_of(result: PoolPick) -> list[str]:
    return [a.unit.job for a in result.launch]


def refused(body: object, **kwargs: object) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        PoolConfig.from_json(body, **kwargs)  # type: ignore[arg-type]
    return caught.value.fields


# The definition


def test_a_pool_is_read_and_written_as_the_contract_says() -> None:
    pool = PoolConfig.from_json({"poolName": "db-main", "size": 3})
    assert pool == PoolConfig("db-main", 3)
    assert pool.to_json() == {"poolName": "db-main", "size": 3}


def test_a_missing_name_and_size_are_both_named() -> None:
    assert refused({}) == {"poolName": "is required", "size": "is required"}


@pytest.mark.parametrize(
    ("size", "why"),
    [
        (0, "between 1 and 100000"),
        (-3, "between 1 and 100000"),
        (MAX_POOL_SIZE + 1, "between 1 and 100000"),
        (1.5, "must be an integer"),
        (False, "not a boolean"),
        ("many", "must be a number"),
        ([3], "must be a number"),
    ],
)
def test_a_bad_size_is_refused_naming_size(size: object, why: str) -> None:
    fields = refused({"poolName": "db", "size": size})
    assert list(fields) == ["size"] and why in fields["size"]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a/b", "may contain only"),
        ("", "must not be empty"),
        ("x" * 101, "at most 100"),
        ("\ud800", "valid Unicode"),
        ("x" * 5000, "at most 400 bytes"),
        (7, "must be a string"),
    ],
)
def test_a_bad_name_is_refused_naming_pool_name(name: object, why: str) -> None:
    fields = refused({"poolName": name, "size": 1})
    assert list(fields) == ["poolName"] and why in fields["poolName"]


def test_unknown_fields_are_refused_and_many_are_counted_not_listed() -> None:
    body: dict[str, object] = {"poolName": "db", "size": 1}
    body.update((f"k{i}", i) for i in range(1000))
    fields = refused(body)
    assert len(fields) == 11 and fields["..."] == "and 990 more unknown fields"
    assert fields["k0"] == "is not a field of a pool"


def test_the_counts_of_a_get_answer_are_refused_as_read_only() -> None:
    fields = refused({"poolName": "db", "size": 1, "inUse": 2, "waiting": 0})
    assert fields == {
        "inUse": "is read-only (counted by the leader); leave it out",
        "waiting": "is read-only (counted by the leader); leave it out",
    }


def test_a_stored_pool_keeps_being_read_past_fields_it_does_not_know() -> None:
    assert PoolConfig.from_json({"poolName": "db", "size": 2, "later": 1}, strict=False).size == 2


@pytest.mark.parametrize("body", [[], "db", None, 3])
def test_a_body_that_is_not_an_object_is_refused_naming_body(body: object) -> None:
    assert "body" in refused(body)


def test_an_update_takes_its_name_from_the_path_and_refuses_another() -> None:
    assert PoolConfig.from_json({"size": 4}, expected_name="db") == PoolConfig("db", 4)
    fields = refused({"poolName": "other", "size": 4}, expected_name="db")
    assert "does not match the pool being updated ('db')" in fields["poolName"]


def test_fit_problem_names_the_run_the_pool_and_the_numbers() -> None:
    assert fit_problem(3, 1, "db", 3) is None
    assert (
        fit_problem(2, 2, "db", 3) == "one run takes 4 slots (2 shards of 2); pool 'db' has only 3"
    )


# The pick


def test_a_unit_of_a_job_in_no_pool_always_launches() -> None:
    result = pick({"db": 1}, {"db": 1}, [unit("a", pool=None, shards=50), unit("b")])
    assert jobs_of(result) == ["a"]
    assert result.launch[0].shards == tuple(range(50))
    assert [h.unit.job for h in result.held] == ["b"]


def test_units_launch_until_the_pool_is_full_in_fire_order() -> None:
    result = pick({"db": 3}, {"db": 1}, [unit("a", 0), unit("b", 1), unit("c", 2)])
    assert jobs_of(result) == ["a", "b"]
    assert [h.unit.job for h in result.held] == ["c"]
    assert result.in_use["db"] == 3


def test_a_chatty_job_cannot_starve_another_of_its_pool() -> None:
    # "a" fired ten times before "b" fired once: "b" goes right after a's first unit.
    waiting = [unit("a", s) for s in range(10)] + [unit("b", 30)]
    first = pick({"db": 1}, {}, waiting)
    assert jobs_of(first) == ["a"]
    turns = PoolTurns().served(jobs_of(first))
    second = pick({"db": 1}, {}, [u for u in waiting if u is not first.launch[0].unit], turns)
    assert jobs_of(second) == ["b"]


def test_within_one_pick_jobs_take_turns() -> None:
    waiting = [unit("a", s) for s in range(5)] + [unit("b", 10 + s) for s in range(5)]
    result = pick({"db": 4}, {}, waiting)
    assert sorted(jobs_of(result)) == ["a", "a", "b", "b"]


def test_never_served_jobs_go_first_by_their_oldest_fire_then_by_name() -> None:
    turns = PoolTurns().served(["a"])
    result = pick({"db": 1}, {}, [unit("a", 0), unit("c", 5), unit("b", 5)], turns)
    assert jobs_of(result) == ["b"]


def test_a_whole_run_takes_all_its_slots_or_waits_and_reserves_the_pool() -> None:
    # "big" is first in line and needs 3 of the 2 free slots: "small" (1 slot) must not slip
    # past it, or a stream of small runs could hold it off for ever.
    result = pick({"db": 4}, {"db": 2}, [unit("big", 0, shards=3), unit("small", 1)])
    assert result.launch == ()
    assert [(h.unit.job, h.shards) for h in result.held] == [("big", (0, 1, 2)), ("small", (0,))]
    assert result.in_use["db"] == 2
    assert [h.reason for h in result.held] == [
        "waiting for 3 slots to free up in pool 'db' (2 of 4 in use)",
        "waiting for its turn in pool 'db' (2 of 4 slots in use)",
    ]


def test_failover_shards_take_what_fits_and_the_rest_wait_first_in_line() -> None:
    waiting = [unit("f", 0, shards=4, slots=2, whole=False), unit("g", 1)]
    result = pick({"db": 5}, {}, waiting)
    assert [(a.unit.job, a.shards) for a in result.launch] == [("f", (0, 1))]
    assert [(h.unit.job, h.shards) for h in result.held] == [("f", (2, 3)), ("g", (0,))]
    assert result.in_use["db"] == 4


def test_a_unit_bigger_than_its_whole_pool_is_reported_never_placeable_and_blocks_nobody() -> None:
    waiting = [unit("huge", 0, shards=4), unit("wide", 1, slots=3, whole=False), unit("ok", 2)]
    result = pick({"db": 2}, {}, waiting)
    assert jobs_of(result) == ["ok"]
    assert [(n.unit.job, n.reason) for n in result.never] == [
        ("huge", NeverReason.TOO_BIG),
        ("wide", NeverReason.TOO_BIG),
    ]
    assert (
        result.never[0].message == "job huge: a run of 4 shards takes 4 slots; pool 'db' has only 2"
    )
    assert result.never[1].message == "job wide: one shard takes 3 slots; pool 'db' has only 2"


def test_a_unit_of_a_pool_that_does_not_exist_is_reported() -> None:
    result = pick({}, {}, [unit("a", pool="gone")])
    assert result.launch == () and result.held == ()
    assert result.never[0].reason is NeverReason.UNKNOWN_POOL
    assert result.never[0].message == "job a: pool 'gone' does not exist"


def test_a_pool_over_its_size_admits_nothing_until_it_drains() -> None:
    result = pick({"db": 2}, {"db": 5}, [unit("a")])
    assert result.launch == () and result.in_use["db"] == 5


def test_pools_do_not_share_slots() -> None:
    waiting = [unit("a", 0, pool="db"), unit("b", 1, pool="mq"), unit("c", 2, pool="db")]
    result = pick({"db": 1, "mq": 1}, {}, waiting)
    assert jobs_of(result) == ["a", "b"]


def test_counts_give_in_use_and_waiting_per_pool() -> None:
    waiting = [unit("a", 0), unit("b", 1), unit("c", 2, shards=9), unit("d", 3, pool="mq")]
    counts = pick({"db": 2, "mq": 1, "idle": 4}, {"db": 1}, waiting).counts()
    assert counts == {
        "db": PoolCounts("db", 2, 2, 2),
        "idle": PoolCounts("idle", 4, 0, 0),
        "mq": PoolCounts("mq", 1, 1, 0),
    }
    assert counts["db"].to_json() == {"poolName": "db", "size": 2, "inUse": 2, "waiting": 2}


def test_slots_in_use_are_counted_from_the_running_tasks() -> None:
    tasks = [RunningTask("a", "db", 2), RunningTask("a", "db", 2), RunningTask("b", None, 9)]
    tasks.append(RunningTask("c", "mq"))
    assert slots_in_use(tasks) == {"db": 4, "mq": 1}


def test_turns_forget_jobs_no_longer_registered() -> None:
    turns = PoolTurns().served(["a", "b", "a"])
    assert (turns.rank("a"), turns.rank("b"), turns.rank("c"), turns.clock) == (2, 1, -1, 3)
    kept = turns.retain({"b"})
    assert dict(kept.last) == {"b": 1} and kept.clock == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"shards": ()},
        {"shards": (1, 1)},
        {"slots_per_shard": 0},
        {"fire_time": datetime(2026, 1, 1)},  # naive on purpose
    ],
)
def test_a_unit_no_launcher_would_make_is_a_bug_not_a_pick(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unit of job a"):
        replace(unit("a"), **bad)


def test_negative_sizes_or_counts_are_a_bug() -> None:
    with pytest.raises(ValueError, match="negative"):
        pick({"db": 1}, {"db": -1}, [])


# Properties

POOLS = ("p", "q")
JOBS = ("a", "b", "c", "d", "e")


@st.composite
def waiting_units(draw: st.DrawFn, max_units: int = 30) -> list[WaitingUnit]:
    count = draw(st.integers(0, max_units))
    return [
        WaitingUnit(
            draw(st.sampled_from(JOBS)),
            T0 + timedelta(seconds=draw(st.integers(0, 20))),
            tuple(range(draw(st.integers(1, 4)))),
            draw(st.integers(1, 3)),
            draw(st.sampled_from((*POOLS, None, "missing"))),
            draw(st.booleans()),
        )
        for _ in range(count)
    ]


sizes_st = st.fixed_dictionaries({pool: st.integers(1, 8) for pool in POOLS})
turns_st = st.lists(st.sampled_from(JOBS), max_size=8).map(PoolTurns().served)


@settings(max_examples=200, deadline=None)
@given(sizes=sizes_st, data=st.data(), waiting=waiting_units(), turns=turns_st)
def test_no_pick_takes_a_pool_over_its_size_and_every_unit_is_accounted(
    sizes: dict[str, int], data: st.DataObject, waiting: list[WaitingUnit], turns: PoolTurns
) -> None:
    in_use = {pool: data.draw(st.integers(0, size)) for pool, size in sizes.items()}
    result = pick(sizes, in_use, waiting, turns)
    taken = dict.fromkeys(POOLS, 0)
    for admission in result.launch:
        if admission.unit.pool is not None:
            taken[admission.unit.pool] += len(admission.shards) * admission.unit.slots_per_shard
    for pool, size in sizes.items():
        assert result.in_use[pool] == in_use[pool] + taken[pool] <= size
    # Each unit's shards are admitted, held or refused, each exactly once.
    shards: dict[int, list[int]] = {}
    for admission in result.launch:
        shards.setdefault(admission.index, []).extend(admission.shards)
    for held in result.held:
        shards.setdefault(held.index, []).extend(held.shards)
    for refusal in result.never:
        shards.setdefault(refusal.index, []).extend(refusal.unit.shards)
    assert {i: sorted(s) for i, s in shards.items()} == {
        i: sorted(u.shards) for i, u in enumerate(waiting)
    }
    for admission in result.launch:
        if admission.unit.whole:
            assert admission.shards == admission.unit.shards
    no_pool = {i for i, u in enumerate(waiting) if u.pool is None}
    assert no_pool <= {a.index for a in result.launch}
    assert {n.index for n in result.never} == {
        i for i, u in enumerate(waiting) if u.pool == "missing" or _too_big(u, sizes)
    }


def _too_big(unit: WaitingUnit, sizes: dict[str, int]) -> bool:
    size = sizes.get(unit.pool or "", 0)
    return unit.pool is not None and (unit.slots if unit.whole else unit.slots_per_shard) > size


@settings(max_examples=120, deadline=None)
@given(sizes=sizes_st, waiting=waiting_units(), turns=turns_st, seed=st.randoms())
def test_the_same_units_in_any_order_give_the_same_pick(
    sizes: dict[str, int], waiting: list[WaitingUnit], turns: PoolTurns, seed: object
) -> None:
    # Distinct fire times: fire order then says everything the order of `waiting` said.
    waiting = [replace(u, fire_time=T0 + timedelta(seconds=i)) for i, u in enumerate(waiting)]
    shuffled = list(waiting)
    seed.shuffle(shuffled)  # type: ignore[attr-defined]

    def decided(units: list[WaitingUnit]) -> tuple[object, ...]:
        result = pick(sizes, {}, units, turns)
        return (
            [(a.unit, a.shards) for a in result.launch],
            sorted((h.unit.fire_time, h.shards) for h in result.held),
            [(n.unit, n.reason) for n in result.never],
            dict(result.in_use),
        )

    assert decided(waiting) == decided(waiting) == decided(shuffled)


@dataclass
class _Job:
    shards: int
    slots: int
    whole: bool
    every: int
    """Fires every this many picks."""
    runs_for: int
    """Each task ends this many picks after its launch."""


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(1, 6),
    jobs=st.lists(
        st.builds(
            _Job,
            st.integers(1, 3),
            st.integers(1, 2),
            st.booleans(),
            st.integers(1, 4),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_every_waiting_job_gets_a_turn_within_a_bound_while_slots_free_up(
    size: int, jobs: list[_Job]
) -> None:
    # Fit each job to the pool (a job too big for it is refused at registration).
    for job in jobs:
        job.slots = min(job.slots, size)
        if job.whole:
            job.shards = max(1, min(job.shards, size // job.slots))
    names = [f"j{i}" for i in range(len(jobs))]
    longest = max(job.runs_for for job in jobs)
    bound = len(jobs) * (longest + 1)
    waiting: list[WaitingUnit] = []
    running: list[tuple[int, RunningTask]] = []  # (ends before pick, task)
    turns = PoolTurns()
    waited = dict.fromkeys(names, 0)
    for now in range(60):
        running = [(end, task) for end, task in running if end > now]
        for name, job in zip(names, jobs, strict=True):
            if now % job.every == 0:
                fire = T0 + timedelta(seconds=now)
                shards = tuple(range(job.shards))
                waiting.append(WaitingUnit(name, fire, shards, job.slots, "p", job.whole))
        in_use = slots_in_use(task for _, task in running)
        assert in_use.get("p", 0) <= size
        result = pick({"p": size}, in_use, waiting, turns)
        served = [a.unit.job for a in result.launch]
        turns = turns.served(served)
        for admission in result.launch:
            ends = now + jobs[names.index(admission.unit.job)].runs_for
            task = RunningTask(admission.unit.job, "p", admission.unit.slots_per_shard)
            running.extend((ends, task) for _ in admission.shards)
        waiting = [replace(h.unit, shards=h.shards) for h in result.held]
        assert not result.never
        for name in names:
            has_waiting = any(u.job == name for u in waiting)
            waited[name] = 0 if name in served or not has_waiting else waited[name] + 1
            assert waited[name] <= bound, f"{name} waited {waited[name]} picks (bound {bound})"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    body=st.dictionaries(
        st.sampled_from(["poolName", "size", "inUse", "x"]) | st.text(max_size=8), json_values
    )
    | json_values
)
def test_any_json_body_is_a_pool_or_a_400_naming_its_fields(body: object) -> None:
    try:
        pool = PoolConfig.from_json(body)
    except InvalidRequest as exc:
        assert exc.http_status == 400 and exc.fields
        return
    assert 1 <= pool.size <= MAX_POOL_SIZE
    assert PoolConfig.from_json(pool.to_json()) == pool
