"""The run policy fields of a job: timeoutSeconds, maxRetries, overlapPolicy, notifyWebhookUrl."""

from __future__ import annotations

import pytest

from scheduler.model.config import JobConfig, OverlapPolicy, webhook_url_problem
from scheduler.model.errors import InvalidRequest
from tests.unit.model.config.test_job import ORIGINALS, read, valid

POLICIES = {
    "timeoutSeconds": 30,
    "maxRetries": 2,
    "overlapPolicy": "REPLACE",
    "notifyWebhookUrl": "https://alerts.example.com/ejcloud?token=abc",
}


def refused(body: dict[str, object], *, strict: bool = True) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        read(body, strict=strict)
    return caught.value.fields


def test_absent_policies_keep_the_originals_behaviour_and_bytes() -> None:
    job = JobConfig.from_bytes(ORIGINALS["simple"], default_time_zone="UTC", strict=False)
    assert (job.timeout_seconds, job.max_retries, job.overlap_policy) == (None, None, None)
    assert job.notify_webhook_url is None and job.overlap is OverlapPolicy.FORBID
    assert job.to_bytes() == ORIGINALS["simple"]
    assert not set(POLICIES) & set(read(valid()).to_json())


def test_policies_are_read_and_stored_after_the_originals_fields() -> None:
    job = read(valid(timeZone="UTC", **POLICIES))
    assert job.timeout_seconds == 30 and job.max_retries == 2
    assert job.overlap is OverlapPolicy.REPLACE
    assert job.notify_webhook_url == POLICIES["notifyWebhookUrl"]
    stored = job.to_json()
    assert list(stored)[-5:] == ["timeZone", *POLICIES]
    # Stored and read back (as a new leader reads the znode) they are the same job.
    again = JobConfig.from_bytes(job.to_bytes(), default_time_zone="UTC", strict=False)
    assert again == JobConfig.from_json(stored, default_time_zone="UTC")
    assert again.policies == job.policies


def test_numbers_and_names_are_read_leniently_as_the_other_fields() -> None:
    job = read(valid(timeoutSeconds="5", maxRetries="0", overlapPolicy=" allow "))
    assert (job.timeout_seconds, job.max_retries, job.overlap) == (5, 0, OverlapPolicy.ALLOW)
    assert job.to_json()["overlapPolicy"] == "ALLOW"


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"timeoutSeconds": 0}, "timeoutSeconds", "must be between 1 and 604800"),
        ({"timeoutSeconds": 604801}, "timeoutSeconds", "must be between 1 and 604800"),
        ({"timeoutSeconds": 1.5}, "timeoutSeconds", "must be an integer"),
        ({"timeoutSeconds": True}, "timeoutSeconds", "not a boolean"),
        ({"maxRetries": -1}, "maxRetries", "must be between 0 and 1000"),
        ({"maxRetries": 1001}, "maxRetries", "must be between 0 and 1000"),
        ({"maxRetries": "many"}, "maxRetries", "must be a number"),
        ({"overlapPolicy": "QUEUE"}, "overlapPolicy", "must be one of FORBID, ALLOW, REPLACE"),
        ({"overlapPolicy": 1}, "overlapPolicy", "must be a string"),
        (
            {"overlapPolicy": "ALLOW", "jobExecutionType": "DAEMON"},
            "overlapPolicy",
            "ALLOW applies to TRANSIENT jobs",
        ),
        ({"notifyWebhookUrl": "ftp://x.example/"}, "notifyWebhookUrl", "http:// or https://"),
        ({"notifyWebhookUrl": "file:///etc/passwd"}, "notifyWebhookUrl", "http:// or https://"),
        ({"notifyWebhookUrl": "https://"}, "notifyWebhookUrl", "must name a host"),
        ({"notifyWebhookUrl": "https://u:p@x.example/"}, "notifyWebhookUrl", "credentials"),
        ({"notifyWebhookUrl": "https://x.example/#a"}, "notifyWebhookUrl", "#fragment"),
        ({"notifyWebhookUrl": "https://x.example/ a"}, "notifyWebhookUrl", "spaces"),
        ({"notifyWebhookUrl": "https://x.example:99999/"}, "notifyWebhookUrl", "not a URL"),
        (
            {"notifyWebhookUrl": "https://x.example/" + "a" * 2048},
            "notifyWebhookUrl",
            "at most 2048 bytes",
        ),
        ({"notifyWebhookUrl": "https://x.example/\ud800"}, "notifyWebhookUrl", "valid Unicode"),
    ],
)
def test_bad_policy_is_refused_naming_its_field(
    changes: dict[str, object], field: str, problem: str
) -> None:
    fields = refused(valid(**changes))
    assert problem in fields[field], fields


def test_daemon_job_may_say_forbid_and_have_a_timeout_and_retries() -> None:
    job = read(
        valid(jobExecutionType="DAEMON", overlapPolicy="FORBID", timeoutSeconds=9, maxRetries=1)
    )
    assert job.overlap is OverlapPolicy.FORBID and job.timeout_seconds == 9


def test_update_can_set_and_reset_a_policy() -> None:
    job = read(valid())
    updated = job.merged({"jobName": "test_job", "maxRetries": 3, "overlapPolicy": "ALLOW"})
    assert updated.max_retries == 3 and updated.overlap is OverlapPolicy.ALLOW
    reset = updated.merged({"maxRetries": None})
    assert reset.max_retries is None and reset.overlap is OverlapPolicy.ALLOW
    with pytest.raises(InvalidRequest) as caught:
        job.merged({"timeoutSeconds": -5})
    assert set(caught.value.fields) == {"timeoutSeconds"}


def test_update_body_with_a_misspelt_policy_is_refused_before_reading_the_job() -> None:
    with pytest.raises(InvalidRequest) as caught:
        JobConfig.check_patch({"jobName": "test_job", "maxRetry": 3})
    assert caught.value.fields == {"maxRetry": "is not a field of a job"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "https://hooks.example.com/services/T0/B0/xyz",
        "HTTPS://Example.com",
        "http://[::1]:9000/a?b=c",
    ],
)
def test_webhook_urls_that_are_accepted(url: str) -> None:
    assert webhook_url_problem(url) is None
