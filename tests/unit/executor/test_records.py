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
    output_message,
    parse_output_message,
    task_output_dir,
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


@pytest.mark.parametrize(
    ("task_id", "expected"),
    [
        ("hello@-@0@-@READY@-@S0@-@abc", "tasks/hello@-@0@-@READY@-@S0@-@abc"),
        ("a b/c%d", "tasks/a%20b%2Fc%25d"),
        ("..", "tasks/%2E."),
        (".hidden", "tasks/%2Ehidden"),
        ("日本", "tasks/%E6%97%A5%E6%9C%AC"),
        ("", "tasks/%"),
    ],
)
def test_a_task_id_maps_to_one_plain_file_name(task_id: str, expected: str) -> None:
    assert task_output_dir(task_id) == expected


def test_long_task_ids_keep_distinct_names_within_the_file_name_limit() -> None:
    first = task_output_dir("j" * 300 + "@-@1")
    second = task_output_dir("j" * 300 + "@-@2")
    assert first != second
    for path in (first, second):
        name = path.removeprefix("tasks/")
        assert "/" not in name and len(name.encode()) <= 200


def test_the_output_message_names_both_files_and_reads_back() -> None:
    message = output_message("tasks/x/stdout", "tasks/x/stderr")
    assert message == "output: stdout=tasks/x/stdout stderr=tasks/x/stderr"
    assert parse_output_message(message) == {
        "stdout": "tasks/x/stdout",
        "stderr": "tasks/x/stderr",
    }


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "BEGIN",
        "output: stdout=../../etc/passwd stderr=tasks/x/stderr",
        "output: stdout=/etc/passwd stderr=tasks/x/stderr",
        "output: stdout=tasks//x stderr=tasks/x/stderr",
        "output: stdout=tasks/x/stdout",
        "output: stdout=a b stderr=c",
    ],
)
def test_other_messages_and_unsafe_paths_name_no_output(message: str | None) -> None:
    assert parse_output_message(message) is None


def test_the_same_status_data_is_decoded_once_and_a_bad_one_every_time() -> None:
    record = started()
    data = encode_status_data(record)
    first = decode_status_data(data)
    # Statistics and metrics each ask for the record of the same update: the same object.
    assert first == record and decode_status_data(str(data)) is first
    for _ in range(2):  # an error is not remembered as an answer
        with pytest.raises(RecordError):
            decode_status_data("not base64!")
