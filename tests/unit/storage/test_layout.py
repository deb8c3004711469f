"""The ZooKeeper layout's codecs and path builders: what another writer left unreadable reads
as the empty value, and every builder spells the original's layout."""

from __future__ import annotations

import pytest

from scheduler.storage import layout


@pytest.mark.parametrize(
    ("data", "count"),
    [(None, 0), (b"", 0), (b"3", 3), (b" 7\n", 7), (b"-2", 0), (b"x", 0), (b"\xff", 0)],
)
def test_a_ready_count_that_is_no_count_reads_as_none_pending(
    data: bytes | None, count: int
) -> None:
    assert layout.decode_count(data) == count


def test_a_ready_count_round_trips_as_the_original_wrote_it() -> None:
    assert layout.encode_count(12) == b"12"
    assert layout.decode_count(layout.encode_count(12)) == 12


@pytest.mark.parametrize(
    "data", [None, b"", b"not json", b"[1, 2]", b'{"failures": "many"}', b"\xff"]
)
def test_an_unreadable_back_off_reads_as_no_failures(data: bytes | None) -> None:
    assert layout.decode_backoff(data) == (0, 0.0)


def test_a_back_off_round_trips() -> None:
    assert layout.decode_backoff(layout.encode_backoff(3, 1234.5)) == (3, 1234.5)


@pytest.mark.parametrize("data", [None, b"", b"soon", b"\xff"])
def test_an_unreadable_fire_record_reads_as_none(data: bytes | None) -> None:
    assert layout.decode_fire_time(data) is None


def test_a_fire_time_keeps_milliseconds() -> None:
    assert layout.encode_fire_time(1700000000.12345) == b"1700000000.123"
    assert layout.decode_fire_time(b"1700000000.123") == 1700000000.123


def test_the_builders_spell_elastic_job_clouds_layout() -> None:
    assert layout.job_path("j") == "/config/job/j"
    assert layout.app_path("a") == "/config/app/a"
    assert layout.ready_path("j") == "/state/ready/j"
    assert layout.running_path("j", "j@-@0@-@READY@-@s1@-@u") == (
        "/state/running/j/j@-@0@-@READY@-@s1@-@u"
    )
    assert layout.failover_path("j", 3) == "/state/failover/j/j@-@3"
    assert layout.disable_path(layout.DISABLE_APP, "a") == "/state/disable/app/a"
    assert layout.ELECTION == "/ha/election"
    assert layout.FRAMEWORK_ID == "/ha/framework_id"


@pytest.mark.parametrize(("key", "item"), [("j@-@3", 3), ("j@-@x", None), ("j", None)])
def test_a_failover_node_name_gives_its_item_or_none(key: str, item: int | None) -> None:
    assert layout.failover_item(key) == item


def test_a_journaled_result_says_whether_it_succeeded() -> None:
    path = layout.result_path("202601010000", True, "abc")
    assert path == "/statistics/results/202601010000/abc-s"
    assert layout.result_succeeded(path.rsplit("/", 1)[1])
    assert not layout.result_succeeded(layout.result_path("202601010000", False, "abc"))
    assert layout.term_path(12) == "/ha/terms/0000000012"
