from __future__ import annotations

import base64
import json

import pytest

from executor.records import (
    MAX_FAILURE_CAUSE_CHARS,
    ExecutionRecord,
    RecordError,
    decode_status_data,
    encode_status_data,
)


def started() -> ExecutionRecord:
    return ExecutionRecord.started(
        job_name="j",
        task_id="j@-@0@-@READY@-@S0@-@u",
        sharding_item=0,
        hostname="agent0",
        ip="10.0.0.1",
        start_time_ms=1_700_000_000_000,
    )


def test_a_started_record_is_open_and_round_trips_through_status_data() -> None:
    record = started()
    assert not record.complete
    assert record.is_success is None
    assert decode_status_data(encode_status_data(record)) == record


def test_status_data_is_base64_json_with_camel_case_names() -> None:
    record = started().finished(1_700_000_000_500)
    doc = json.loads(base64.b64decode(encode_status_data(record)))
    assert doc["version"] == 1
    assert doc["record"] == {
        "id": record.id,
        "jobName": "j",
        "taskId": "j@-@0@-@READY@-@S0@-@u",
        "shardingItem": 0,
        "hostname": "agent0",
        "ip": "10.0.0.1",
        "executionSource": "CLOUD_EXECUTOR",
        "startTimeMs": 1_700_000_000_000,
        "completeTimeMs": 1_700_000_000_500,
        "isSuccess": True,
        "failureCause": "",
    }


def test_finishing_keeps_the_id_and_records_the_failure() -> None:
    record = started()
    failed = record.finished(1_700_000_001_000, "ValueError: boom")
    assert failed.id == record.id
    assert failed.complete and failed.is_success is False
    assert failed.failure_cause == "ValueError: boom"
    assert decode_status_data(encode_status_data(failed)) == failed


def test_a_long_failure_cause_keeps_its_end() -> None:
    cause = "x" * 10_000 + "ValueError: the real reason"
    failed = started().finished(1, cause)
    assert len(failed.failure_cause) == MAX_FAILURE_CAUSE_CHARS
    assert failed.failure_cause.endswith("ValueError: the real reason")


def test_two_runs_get_different_ids() -> None:
    assert started().id != started().id


@pytest.mark.parametrize("empty", [None, "", b""])
def test_an_update_without_data_has_no_record(empty: str | bytes | None) -> None:
    assert decode_status_data(empty) is None


def _encoded(doc: object) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ("%%%", "base64"),
        (_encoded([1]), "not a JSON object"),
        (_encoded({"version": 2, "record": {}}), "version"),
        (_encoded({"version": 1, "record": "x"}), "record"),
        (
            _encoded(
                {
                    "version": 1,
                    "record": {**started().to_json(), "shardingItem": "0", "isSuccess": "yes"},
                }
            ),
            "isSuccess.*shardingItem",
        ),
        (
            _encoded({"version": 1, "record": {**started().to_json(), "isSuccess": True}}),
            "both set or both null",
        ),
    ],
)
def test_unreadable_status_data_names_the_problem(data: str, named: str) -> None:
    with pytest.raises(RecordError, match=named):
        decode_status_data(data)
