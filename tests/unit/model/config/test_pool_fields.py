"""A job's pool fields (issue 28): `pool` and `poolSlots`, checked and bounded, each problem
named under its field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.config import _wire
from scheduler.model.config.pool_fields import (
    MAX_POOL_SLOTS,
    JobPool,
    pool_name_problem,
    read_job_pool,
)
from scheduler.model.errors import InvalidRequest


def refused(body: dict[str, object], *, strict: bool = True) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        JobPool.from_json(body, strict=strict)
    return caught.value.fields


def test_a_job_without_pool_fields_is_in_no_pool_and_writes_none() -> None:
    job_pool = JobPool.from_json({"jobName": "a", "cron": "0/5 * * * * ?"})
    assert job_pool == JobPool(None, 1)
    assert job_pool.to_json() == {}


def test_a_pool_and_its_slots_are_read_and_written_back() -> None:
    job_pool = JobPool.from_json({"pool": "db-main", "poolSlots": 3})
    assert job_pool == JobPool("db-main", 3)
    assert job_pool.to_json() == {"pool": "db-main", "poolSlots": 3}
    assert JobPool.from_json(job_pool.to_json()) == job_pool


def test_pool_slots_default_to_one() -> None:
    assert JobPool.from_json({"pool": "db"}).to_json() == {"pool": "db", "poolSlots": 1}


@pytest.mark.parametrize("none", ["", None])
def test_an_empty_or_null_pool_means_no_pool(none: str | None) -> None:
    assert JobPool.from_json({"pool": none}) == JobPool(None, 1)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("db/main", "may contain only"),
        (".hidden", "must not start"),
        ("x" * 101, "at most 100 characters"),
        ("list", "reserved"),
        ("db\x00", "NUL"),
        ("\ud800", "valid Unicode"),
        ("é" * 300, "at most 400 bytes"),
        (5, "must be a string"),
        (["db"], "must be a string"),
    ],
)
def test_a_bad_pool_name_is_refused_naming_pool(value: object, why: str) -> None:
    fields = refused({"pool": value})
    assert list(fields) == ["pool"] and why in fields["pool"]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "between 1 and 1000"),
        (-1, "between 1 and 1000"),
        (MAX_POOL_SLOTS + 1, "between 1 and 1000"),
        (2**40, "at most"),
        (2.5, "must be an integer"),
        (True, "not a boolean"),
        ("two", "must be a number"),
        ("9" * 100, "at most 64 characters"),
    ],
)
def test_bad_pool_slots_are_refused_naming_pool_slots(value: object, why: str) -> None:
    fields = refused({"pool": "db", "poolSlots": value})
    assert list(fields) == ["poolSlots"] and why in fields["poolSlots"]


def test_pool_slots_without_a_pool_are_refused() -> None:
    fields = refused({"poolSlots": 2})
    assert "set pool too" in fields["poolSlots"]
    assert "pool" not in fields


def test_stored_jobs_get_the_same_checks() -> None:
    assert "poolSlots" in refused({"pool": "db", "poolSlots": 0}, strict=False)
    assert JobPool.from_json({"pool": "db", "poolSlots": "2"}, strict=False) == JobPool("db", 2)


def test_problems_join_the_jobs_other_problems_on_one_reader() -> None:
    reader = _wire.FieldReader({"pool": "a b", "poolSlots": 0, "cpuCount": "x"}, strict=True)
    reader.number("cpuCount")
    read_job_pool(reader)
    assert set(reader.problems) == {"pool", "poolSlots", "cpuCount"}


def test_pool_names_follow_the_app_and_job_name_rule() -> None:
    assert pool_name_problem("db_main-1.eu") is None
    assert pool_name_problem("") == "must not be empty"


@settings(max_examples=300, deadline=None)
@given(
    pool=st.none() | st.text(max_size=12) | st.integers() | st.booleans(),
    slots=st.none() | st.integers() | st.floats() | st.text(max_size=6) | st.booleans(),
)
def test_any_pool_fields_are_read_or_refused_by_name(pool: object, slots: object) -> None:
    try:
        job_pool = JobPool.from_json({"pool": pool, "poolSlots": slots})
    except InvalidRequest as exc:
        assert set(exc.fields) <= {"pool", "poolSlots"} and exc.fields
        return
    assert 1 <= job_pool.pool_slots <= MAX_POOL_SLOTS
    assert JobPool.from_json(job_pool.to_json()) == job_pool
