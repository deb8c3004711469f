"""JobConfig: the original's JSON byte for byte, strict API input, lenient stored reads, merge."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from scheduler.model.config import (
    MAX_SHARDING_TOTAL_COUNT,
    SCRIPT_JOB_CLASS,
    JobConfig,
    JobExecutionType,
    JobProperties,
    JobType,
    parse_sharding_item_parameters,
)
from scheduler.model.config.job import _built
from scheduler.model.errors import InvalidRequest

ZONE = "Asia/Shanghai"
PROPERTIES = (
    '"jobProperties":{'
    '"job_exception_handler":"com.dangdang.ddframe.job.executor.handler.impl.'
    'DefaultJobExceptionHandler",'
    '"executor_service_handler":"com.dangdang.ddframe.job.executor.handler.impl.'
    'DefaultExecutorServiceHandler"}'
)


def original(
    job_type: str = "SIMPLE",
    job_class: str = "com.dangdang.ddframe.job.cloud.scheduler.fixture.TestSimpleJob",
    specific: str = "",
    tail: str = "",
    parameters: str = "",
    execution_type: str = "TRANSIENT",
) -> bytes:
    """A job as Elastic-Job-Cloud 2.1.5 writes it (T/fixture/CloudJsonConstants.java)."""
    return (
        f'{{"jobName":"test_job","jobClass":"{job_class}","jobType":"{job_type}",'
        f'"cron":"0/30 * * * * ?","shardingTotalCount":10,"shardingItemParameters":"{parameters}",'
        f'"jobParameter":"","failover":true,"misfire":true,"description":"",{PROPERTIES},'
        f'{specific}"appName":"test_app","cpuCount":1.0,"memoryMB":128.0,'
        f'"jobExecutionType":"{execution_type}"{tail}}}'
    ).encode()


ORIGINALS = {
    "simple": original(),
    "daemon": original(execution_type="DAEMON"),
    "dataflow": original("DATAFLOW", specific='"streamingProcess":true,'),
    "script": original("SCRIPT", SCRIPT_JOB_CLASS, specific='"scriptCommandLine":"bin/run.sh",'),
    "spring": original(
        tail=',"beanName":"springSimpleJob","applicationContext":"applicationContext.xml"'
    ),
    "parameters": original(parameters="0\\u003dBeijing,1\\u003dShanghai,2\\u003dGuangzhou"),
}


def valid(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "jobName": "test_job",
        "jobClass": "tests.fixtures:simple_job",
        "jobType": "SIMPLE",
        "cron": "0/30 * * * * ?",
        "shardingTotalCount": 3,
        "appName": "test_app",
        "cpuCount": 0.5,
        "memoryMB": 64,
        "jobExecutionType": "TRANSIENT",
    }
    body.update(changes)
    return body


def read(data: object, *, strict: bool = True) -> JobConfig:
    return JobConfig.from_json(data, default_time_zone=ZONE, strict=strict)


def invalid(data: object, *, strict: bool = True) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        read(data, strict=strict)
    return caught.value


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_original_job_json_round_trips_byte_for_byte(name: str) -> None:
    data = ORIGINALS[name]
    job = JobConfig.from_bytes(data, default_time_zone=ZONE, strict=False)
    assert job.to_bytes() == data


def test_original_field_order_is_kept() -> None:
    job = JobConfig.from_bytes(ORIGINALS["spring"], default_time_zone=ZONE, strict=False)
    assert list(job.to_json()) == [
        "jobName",
        "jobClass",
        "jobType",
        "cron",
        "shardingTotalCount",
        "shardingItemParameters",
        "jobParameter",
        "failover",
        "misfire",
        "description",
        "jobProperties",
        "appName",
        "cpuCount",
        "memoryMB",
        "jobExecutionType",
        "beanName",
        "applicationContext",
    ]


def test_original_job_is_read_into_python_values() -> None:
    job = JobConfig.from_bytes(ORIGINALS["parameters"], default_time_zone=ZONE, strict=False)
    assert job == JobConfig(
        job_name="test_job",
        job_type=JobType.SIMPLE,
        job_class="com.dangdang.ddframe.job.cloud.scheduler.fixture.TestSimpleJob",
        cron="0/30 * * * * ?",
        sharding_total_count=10,
        sharding_item_parameters="0=Beijing,1=Shanghai,2=Guangzhou",
        failover=True,
        misfire=True,
        app_name="test_app",
        cpu_count=1.0,
        memory_mb=128.0,
        execution_type=JobExecutionType.TRANSIENT,
        default_time_zone=ZONE,
    )
    assert job.sharding_parameters == {0: "Beijing", 1: "Shanghai", 2: "Guangzhou"}
    assert job.sharding_parameter(1) == "Shanghai"
    assert job.sharding_parameter(9) == ""


def test_new_job_is_written_with_defaults_and_the_original_names() -> None:
    assert read(valid()).to_bytes() == (
        b'{"jobName":"test_job","jobClass":"tests.fixtures:simple_job","jobType":"SIMPLE",'
        b'"cron":"0/30 * * * * ?","shardingTotalCount":3,"shardingItemParameters":"",'
        b'"jobParameter":"","failover":false,"misfire":false,"description":"",'
        + PROPERTIES.encode()
        + b',"appName":"test_app","cpuCount":0.5,"memoryMB":64.0,'
        b'"jobExecutionType":"TRANSIENT"}'
    )


def test_python_api_exposes_enums_and_units() -> None:
    job = read(valid(jobType="DATAFLOW", streamingProcess="true", jobExecutionType="DAEMON"))
    assert job.job_type is JobType.DATAFLOW
    assert job.execution_type is JobExecutionType.DAEMON
    assert (job.cpu_count, job.memory_mb, job.streaming_process) == (0.5, 64.0, True)
    assert job.job_properties == JobProperties()


def test_type_specific_fields_are_written_only_for_their_type() -> None:
    extras = {"streamingProcess": True, "scriptCommandLine": "run.sh"}
    simple = read(valid(**extras)).to_json()
    assert "streamingProcess" not in simple and "scriptCommandLine" not in simple
    dataflow = read(valid(jobType="DATAFLOW", **extras)).to_json()
    assert dataflow["streamingProcess"] is True and "scriptCommandLine" not in dataflow
    script = read(valid(jobType="SCRIPT", **extras)).to_json()
    assert script["scriptCommandLine"] == "run.sh" and "streamingProcess" not in script


def test_script_job_is_stored_with_the_originals_script_job_class() -> None:
    job = read(valid(jobType="SCRIPT", jobClass="ignored.module:x", scriptCommandLine="run.sh"))
    assert job.job_class == SCRIPT_JOB_CLASS
    assert job.to_json()["jobClass"] == SCRIPT_JOB_CLASS
    no_class = valid(jobType="SCRIPT", scriptCommandLine="run.sh")
    del no_class["jobClass"]
    assert read(no_class).job_class == SCRIPT_JOB_CLASS


def test_spring_fields_are_omitted_when_null() -> None:
    assert "beanName" not in read(valid(beanName=None, applicationContext=None)).to_json()
    both = read(valid(beanName="bean", applicationContext="context.xml")).to_json()
    assert (both["beanName"], both["applicationContext"]) == ("bean", "context.xml")


def test_stored_job_with_only_one_spring_field_drops_both_like_the_original() -> None:
    job = read(valid(beanName="bean"), strict=False)
    assert (job.bean_name, job.application_context) == (None, None)


def test_time_zone_is_stored_last_and_only_when_the_job_has_one() -> None:
    assert "timeZone" not in read(valid()).to_json()
    job = read(valid(timeZone="Europe/Berlin", beanName="b", applicationContext="c"))
    assert list(job.to_json())[-1] == "timeZone"
    assert job.to_bytes().endswith(b',"timeZone":"Europe/Berlin"}')


def test_numbers_and_booleans_sent_as_strings_are_accepted() -> None:
    job = read(
        valid(
            shardingTotalCount="5",
            cpuCount="0.1",
            memoryMB="128",
            failover="true",
            misfire="FALSE",
            jobType="simple",
            jobExecutionType=" daemon ",
        )
    )
    assert (job.sharding_total_count, job.cpu_count, job.memory_mb) == (5, 0.1, 128.0)
    assert (job.failover, job.misfire) == (True, False)
    assert (job.job_type, job.execution_type) == (JobType.SIMPLE, JobExecutionType.DAEMON)
    assert read(valid(shardingTotalCount=5.0)).sharding_total_count == 5
    assert read(valid(shardingTotalCount="5.0")).sharding_total_count == 5


def test_legacy_fields_are_accepted_and_ignored() -> None:
    # appURL/bootstrapScript on jobs: before 2.0.5, and still in the original console's form.
    job = read(valid(appURL="http://old/field", bootstrapScript="pre-2.0.5 leftover"))
    assert "appURL" not in job.to_json() and "bootstrapScript" not in job.to_json()
    assert invalid(valid(bootstrapScript=["x"])).fields == {"bootstrapScript": "must be a string"}


def test_unknown_fields_and_job_properties_are_refused_in_new_input_only() -> None:
    data = valid(
        retries=3,
        jobProperties={"job_exception_handler": "my.Handler", "other": 1},
    )
    refused = invalid(data)
    assert refused.fields == {
        "retries": "is not a field of a job",
        "jobProperties.other": (
            "is not a job property (known: job_exception_handler, executor_service_handler)"
        ),
    }
    stored = read(data, strict=False)
    assert stored.job_properties == JobProperties(job_exception_handler="my.Handler")


def test_every_field_the_original_console_sends_is_accepted() -> None:
    # The original console's job form (job_common.js getJob()), values as the form's strings.
    console = valid(
        jobName="console_job",
        appName="test_app",
        jobClass="demo.jobs.Hello",
        cron="0/5 * * * * ?",
        jobType="SIMPLE",
        cpuCount="0.1",
        jobExecutionType="TRANSIENT",
        memoryMB="64",
        bootstrapScript="bin/start.sh",
        beanName="",
        shardingTotalCount="2",
        jobParameter="",
        failover=True,
        misfire=False,
        streamingProcess=False,
        applicationContext="",
        shardingItemParameters="0=a,1=b",
        scriptCommandLine="",
        description="",
    )
    assert read(console).sharding_total_count == 2


@pytest.mark.parametrize(
    "job_class", ["pkg.module:run", "pkg.module:Job.run", "pkg.module.Job", "a.b", "_p.m2:f_3"]
)
def test_python_job_class_spellings_are_accepted(job_class: str) -> None:
    assert read(valid(jobClass=job_class)).job_class == job_class


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"jobName": None}, "jobName", "is required"),
        ({"jobName": ""}, "jobName", "must not be empty"),
        ({"jobName": "list"}, "jobName", "'list' is reserved"),
        ({"jobName": "j" * 101}, "jobName", "must be at most 100 characters"),
        ({"jobName": "a/b"}, "jobName", "may contain only letters, digits"),
        ({"jobName": "job@-@0"}, "jobName", "may contain only letters, digits"),
        ({"jobName": 7}, "jobName", "must be a string"),
        ({"jobType": None}, "jobType", "is required"),
        ({"jobType": "CRON"}, "jobType", "must be one of SIMPLE, DATAFLOW, SCRIPT, not 'CRON'"),
        ({"jobClass": None}, "jobClass", "is required for SIMPLE jobs"),
        ({"jobClass": "", "jobType": "DATAFLOW"}, "jobClass", "is required for DATAFLOW jobs"),
        ({"jobClass": "Job"}, "jobClass", "must name Python code as 'package.module:callable'"),
        ({"jobClass": "a.b$Inner"}, "jobClass", "must name Python code"),
        ({"jobClass": "a.b:"}, "jobClass", "must name Python code"),
        ({"jobClass": "a b.c"}, "jobClass", "must name Python code"),
        ({"jobClass": "1a.b"}, "jobClass", "must name Python code"),
        ({"jobClass": "a." + "b" * 254}, "jobClass", "must be at most 255 characters"),
        ({"jobClass": SCRIPT_JOB_CLASS}, "jobClass", "is the SCRIPT placeholder"),
        ({"jobType": "SCRIPT"}, "scriptCommandLine", "is required for SCRIPT jobs"),
        ({"jobType": "SCRIPT", "scriptCommandLine": " "}, "scriptCommandLine", "is required"),
        ({"cron": "", "jobExecutionType": "DAEMON"}, "cron", "is required for a DAEMON job"),
        ({"cron": "0 0 0 15W * ?"}, "cron", "'W' (nearest weekday) is not supported"),
        ({"cron": "0 0 1 * 1"}, "cron", "both restricted"),
        ({"cron": "0 0 0 1 1 ? 2020"}, "cron", "never fires after"),
        ({"cron": 5}, "cron", "must be a string"),
        ({"timeZone": "Mars/Base"}, "timeZone", "unknown time zone 'Mars/Base'"),
        ({"timeZone": ""}, "timeZone", "is not an IANA time zone name"),
        ({"timeZone": 8}, "timeZone", "must be a string"),
        ({"shardingTotalCount": None}, "shardingTotalCount", "is required"),
        ({"shardingTotalCount": 0}, "shardingTotalCount", "must be greater than 0"),
        ({"shardingTotalCount": -3}, "shardingTotalCount", "must be greater than 0"),
        ({"shardingTotalCount": 2.5}, "shardingTotalCount", "must be an integer"),
        ({"shardingTotalCount": True}, "shardingTotalCount", "not a boolean"),
        ({"shardingTotalCount": "x"}, "shardingTotalCount", "must be a number"),
        (
            {"shardingTotalCount": MAX_SHARDING_TOTAL_COUNT + 1},
            "shardingTotalCount",
            f"must be at most {MAX_SHARDING_TOTAL_COUNT}",
        ),
        ({"shardingItemParameters": "0=a,3=d"}, "shardingItemParameters", "item 3 is outside 0-2"),
        ({"shardingItemParameters": "0=a,0=b"}, "shardingItemParameters", "item 0 is given more"),
        ({"shardingItemParameters": "a"}, "shardingItemParameters", "is not item=parameter"),
        ({"shardingItemParameters": "x=a"}, "shardingItemParameters", "item 'x' is not an integer"),
        ({"shardingItemParameters": 1}, "shardingItemParameters", "must be a string"),
        ({"jobParameter": {"a": 1}}, "jobParameter", "must be a string"),
        ({"description": ["x"]}, "description", "must be a string"),
        ({"failover": "yes"}, "failover", "must be true or false, not 'yes'"),
        ({"misfire": 1}, "misfire", "must be true or false"),
        ({"streamingProcess": "on"}, "streamingProcess", "must be true or false"),
        ({"jobProperties": "{}"}, "jobProperties", "must be an object"),
        (
            {"jobProperties": {"executor_service_handler": 3}},
            "jobProperties.executor_service_handler",
            "must be a string",
        ),
        ({"appName": None}, "appName", "is required"),
        ({"appName": ""}, "appName", "must not be empty"),
        ({"appName": "list"}, "appName", "'list' is reserved"),
        ({"appName": "my app"}, "appName", "may contain only letters, digits"),
        ({"cpuCount": None}, "cpuCount", "is required"),
        ({"cpuCount": 0.0009}, "cpuCount", "must be at least 0.001"),
        ({"cpuCount": "NaN"}, "cpuCount", "must be a number, not 'NaN'"),
        ({"cpuCount": "-Infinity"}, "cpuCount", "must be a number"),
        ({"cpuCount": False}, "cpuCount", "must be a number, not a boolean"),
        ({"memoryMB": None}, "memoryMB", "is required"),
        ({"memoryMB": 0.99}, "memoryMB", "must be at least 1"),
        ({"memoryMB": "1e400"}, "memoryMB", "must be a finite number"),
        ({"jobExecutionType": None}, "jobExecutionType", "is required"),
        ({"jobExecutionType": "ONCE"}, "jobExecutionType", "must be one of TRANSIENT, DAEMON"),
        ({"beanName": "bean"}, "applicationContext", "must be given together with beanName"),
        ({"applicationContext": "c.xml"}, "beanName", "must be given together with"),
        ({"beanName": 1, "applicationContext": "c"}, "beanName", "must be a string"),
    ],
)
def test_invalid_field_is_refused_by_name(
    changes: dict[str, object], field: str, problem: str
) -> None:
    error = invalid(valid(**changes))
    assert set(error.fields) == {field}
    assert problem in error.fields[field]
    assert error.message.startswith("invalid job configuration: ")
    assert error.http_status == 400


def test_every_bad_field_is_reported_at_once() -> None:
    error = invalid(
        {
            "jobName": "list",
            "jobType": "SIMPLE",
            "cron": "0 0 0 LW * ?",
            "shardingTotalCount": "0",
            "failover": "maybe",
            "appName": "",
            "cpuCount": True,
            "memoryMB": "NaN",
            "jobExecutionType": "X",
        }
    )
    assert set(error.fields) == {
        "jobName",
        "jobClass",
        "cron",
        "shardingTotalCount",
        "failover",
        "appName",
        "cpuCount",
        "memoryMB",
        "jobExecutionType",
    }
    for field, problem in error.fields.items():
        assert f"{field}: {problem}" in error.message


def test_bad_count_does_not_hide_other_problems_or_invent_parameter_errors() -> None:
    error = invalid(valid(shardingTotalCount=0, shardingItemParameters="5=x"))
    assert set(error.fields) == {"shardingTotalCount"}


@pytest.mark.parametrize(
    ("body", "fields"),
    [([], {"body"}), ("test_job", {"body"}), (None, {"body"}), (3, {"body"})],
)
def test_body_that_is_not_an_object_is_refused(body: object, fields: set[str]) -> None:
    assert set(invalid(body).fields) == fields
    assert set(invalid(body, strict=False).fields) == fields


def test_bytes_with_nan_literals_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        JobConfig.from_bytes(b'{"cpuCount": NaN}', default_time_zone=ZONE)
    assert set(caught.value.fields) == {"body"}


def test_default_time_zone_must_be_a_real_zone() -> None:
    with pytest.raises(ValueError, match="default_time_zone"):
        JobConfig.from_json(valid(), default_time_zone="Nowhere/Land")


def test_stored_job_the_original_wrote_is_readable_even_where_new_input_is_refused() -> None:
    stored = valid(
        jobName="list",
        jobClass="com.example.Outer$InnerJob",
        cron="0 0 0 15W * ?",
        shardingTotalCount=MAX_SHARDING_TOTAL_COUNT + 1,
        shardingItemParameters="0=a,20000=z,0=b",
        appName="",
        timeZone="Nowhere/Land",
    )
    job = read(stored, strict=False)
    assert (job.job_name, job.job_class, job.app_name) == ("list", "com.example.Outer$InnerJob", "")
    assert job.sharding_parameters == {0: "b"}  # out of range dropped, last value wins
    with pytest.raises(InvalidRequest) as caught:
        _ = job.cron_spec
    assert set(caught.value.fields) == {"cron", "timeZone"}


def test_stored_script_job_without_a_command_is_readable() -> None:
    job = read(valid(jobType="SCRIPT", jobClass="anything"), strict=False)
    assert (job.job_class, job.script_command_line) == (SCRIPT_JOB_CLASS, "")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"jobName": ""}, "jobName"),
        ({"cron": None, "jobExecutionType": "DAEMON"}, "cron"),
        ({"jobType": "FOO"}, "jobType"),
        ({"jobClass": ""}, "jobClass"),
        ({"shardingTotalCount": 0}, "shardingTotalCount"),
        ({"appName": None}, "appName"),
        ({"cpuCount": 0}, "cpuCount"),
        ({"memoryMB": 0.5}, "memoryMB"),
        ({"jobExecutionType": None}, "jobExecutionType"),
        ({"failover": "x"}, "failover"),
        ({"jobProperties": []}, "jobProperties"),
    ],
)
def test_stored_job_is_refused_where_the_originals_reader_refused_it(
    changes: dict[str, object], field: str
) -> None:
    assert set(invalid(valid(**changes), strict=False).fields) == {field}


def test_stored_job_with_malformed_parameters_fails_only_when_they_are_used() -> None:
    job = read(valid(shardingItemParameters="0:a"), strict=False)
    with pytest.raises(InvalidRequest) as caught:
        _ = job.sharding_parameters
    assert set(caught.value.fields) == {"shardingItemParameters"}


def test_app_exists_callback_is_asked_about_a_well_formed_app_name() -> None:
    asked: list[str] = []

    def app_exists(name: str) -> bool:
        asked.append(name)
        return name == "test_app"

    JobConfig.from_json(valid(), default_time_zone=ZONE, app_exists=app_exists)
    with pytest.raises(InvalidRequest) as caught:
        JobConfig.from_json(
            valid(appName="ghost_app", cron="bad"), default_time_zone=ZONE, app_exists=app_exists
        )
    assert caught.value.fields["appName"] == "app 'ghost_app' is not registered; register it first"
    assert set(caught.value.fields) == {"appName", "cron"}
    JobConfig.from_json(valid(appName="bad name"), default_time_zone=ZONE, strict=False)
    with pytest.raises(InvalidRequest):
        JobConfig.from_json(
            valid(appName="bad name"), default_time_zone=ZONE, app_exists=app_exists
        )
    JobConfig.from_json(
        valid(appName="ghost_app"), default_time_zone=ZONE, strict=False, app_exists=app_exists
    )
    assert asked == ["test_app", "ghost_app"]


def test_job_without_a_zone_uses_the_default_and_its_own_zone_wins() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    default_zone = read(valid(cron="0 0 9 * * ?"))
    assert default_zone.effective_time_zone == "Asia/Shanghai"
    assert default_zone.cron_spec.next_fire_times(after, 1) == [datetime(2026, 1, 1, 1, tzinfo=UTC)]
    own_zone = read(valid(cron="0 0 9 * * ?", timeZone="UTC"))
    assert own_zone.effective_time_zone == "UTC"
    assert own_zone.cron_spec.next_fire_times(after, 1) == [datetime(2026, 1, 1, 9, tzinfo=UTC)]


def test_cron_spec_is_parsed_once_and_does_not_affect_equality() -> None:
    job = read(valid())
    assert job.cron_spec is job.cron_spec
    fresh = read(valid(), strict=False)
    assert "cron_spec" not in vars(fresh)
    assert job == fresh
    assert hash(job) == hash(fresh)
    assert fresh.cron_spec == job.cron_spec


def test_crontab_cron_is_accepted_and_stored_as_written() -> None:
    job = read(valid(cron="*/15 9-17 * * 1-5"))
    assert job.to_json()["cron"] == "*/15 9-17 * * 1-5"
    assert job.cron_spec.syntax.value == "crontab"


def test_merge_keeps_the_fields_the_update_leaves_out() -> None:
    existing = read(valid(description="nightly", failover=True, timeZone="UTC"))
    updated = existing.merged({"jobName": "test_job", "cron": "0 0 * * 0", "cpuCount": "2"})
    assert updated.cron == "0 0 * * 0"
    assert updated.cpu_count == 2.0
    assert (updated.description, updated.failover, updated.time_zone) == ("nightly", True, "UTC")
    assert updated.default_time_zone == ZONE


def test_merge_null_resets_a_field_to_its_default() -> None:
    existing = read(valid(timeZone="UTC", description="x"))
    updated = existing.merged({"timeZone": None, "description": None})
    assert (updated.time_zone, updated.description) == (None, "")
    assert updated.effective_time_zone == ZONE


def test_merge_validates_the_whole_result() -> None:
    stored = read(
        valid(jobClass="com.example.Outer$Job", shardingItemParameters="2=c"), strict=False
    )
    with pytest.raises(InvalidRequest) as caught:
        stored.merged({"shardingTotalCount": 2, "cron": "0 0 0 L-1 * ?"})
    assert set(caught.value.fields) == {"jobClass", "shardingItemParameters", "cron"}


def test_merge_from_script_to_simple_needs_a_real_job_class() -> None:
    script = read(valid(jobType="SCRIPT", scriptCommandLine="run.sh"))
    with pytest.raises(InvalidRequest) as caught:
        script.merged({"jobType": "SIMPLE"})
    assert "is the SCRIPT placeholder" in caught.value.fields["jobClass"]
    simple = script.merged({"jobType": "SIMPLE", "jobClass": "pkg.jobs:run"})
    assert (simple.job_class, "scriptCommandLine" in simple.to_json()) == ("pkg.jobs:run", False)


def test_merge_refuses_another_jobs_name_and_checks_the_app() -> None:
    existing = read(valid())
    with pytest.raises(InvalidRequest) as caught:
        existing.merged({"jobName": "other_job"})
    assert caught.value.fields == {"jobName": "does not match the one being updated ('test_job')"}
    with pytest.raises(InvalidRequest) as caught:
        existing.merged({"appName": "gone"}, app_exists=lambda name: False)
    assert set(caught.value.fields) == {"appName"}


@pytest.mark.parametrize(
    ("text", "total", "expected"),
    [
        ("", 3, {}),
        ("  ", 3, {}),
        ("0=a,1=b,2=c", 3, {0: "a", 1: "b", 2: "c"}),
        (" 0 = a , 2=c ", 3, {0: "a", 2: "c"}),
        ("0=a,1=b,", 2, {0: "a", 1: "b"}),
        ("0=key=value", 1, {0: "key=value"}),
        ("0=", 1, {0: ""}),
        ("+1=x", 2, {1: "x"}),
        ("0=北京", 1, {0: "北京"}),
    ],
)
def test_sharding_item_parameters_are_parsed(
    text: str, total: int, expected: dict[int, str]
) -> None:
    assert parse_sharding_item_parameters(text, total) == expected


@pytest.mark.parametrize(
    ("text", "total", "problem"),
    [
        ("0=a,,1=b", 2, "entry 2 ('') is not item=parameter, as in '0=a,1=b'"),
        ("a", 1, "entry 1 ('a') is not item=parameter"),
        ("x=1", 1, "item 'x' is not an integer"),
        ("=a", 1, "item '' is not an integer"),
        ("1.5=a", 2, "item '1.5' is not an integer"),
        ("99999999999=a", 1, "item '99999999999' is not an integer"),
        ("-1=a", 2, "item -1 is outside 0-1 (shardingTotalCount is 2)"),
        ("2=a", 2, "item 2 is outside 0-1"),
        ("1=a,1=b", 2, "item 1 is given more than once"),
    ],
)
def test_malformed_sharding_item_parameters_are_refused(
    text: str, total: int, problem: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_sharding_item_parameters(text, total)
    assert set(caught.value.fields) == {"shardingItemParameters"}
    assert problem in caught.value.fields["shardingItemParameters"]


def test_lenient_sharding_parameters_drop_what_the_original_ignored_at_launch() -> None:
    assert parse_sharding_item_parameters("0=a,5=x,-1=y,0=b", 2, strict=False) == {0: "b"}
    with pytest.raises(InvalidRequest):
        parse_sharding_item_parameters("0=a,oops", 2, strict=False)


def test_sharding_parameters_mapping_is_read_only() -> None:
    job = read(valid(shardingItemParameters="0=a"))
    with pytest.raises(TypeError):
        job.sharding_parameters[1] = "b"  # type: ignore[index]


def test_job_is_frozen() -> None:
    job = read(valid())
    with pytest.raises(AttributeError):
        job.cron = "* * * * *"  # type: ignore[misc]


@pytest.mark.parametrize("cron", ["", "   ", None])
def test_a_transient_job_may_have_no_cron(cron: str | None) -> None:
    """Issue 27: it fires only when triggered or in a workflow; stored with cron ""."""
    data = valid()
    if cron is None:
        del data["cron"]
    else:
        data["cron"] = cron
    job = read(data)
    assert not job.has_cron and job.cron == ""
    assert job.to_json()["cron"] == ""
    assert read(job.to_json(), strict=False) == job


def test_a_daemon_job_still_needs_a_cron() -> None:
    error = invalid(valid(cron="", jobExecutionType="DAEMON"))
    assert "DAEMON" in error.fields["cron"]


def test_a_job_read_is_the_job_its_fields_make_frozen_and_hashed_alike() -> None:
    # Reading fills the instance's dict at once (issue 29: the dataclass's own __init__ set 28
    # fields one object.__setattr__ at a time); the result must be the same value.
    read = JobConfig.from_bytes(original(), default_time_zone=ZONE, strict=False)
    values = {f.name: getattr(read, f.name) for f in dataclasses.fields(read) if f.init}
    made = JobConfig(**values)
    assert read == made and hash(read) == hash(made) and repr(read) == repr(made)
    assert read.to_bytes() == made.to_bytes()
    assert read.cron_spec == made.cron_spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.cron = "0 0 4 * * ?"  # type: ignore[misc]
    assert _built(**values) == made
    # Not every field given, or one it lacks: the dataclass's own __init__ says so.
    with pytest.raises(TypeError):
        _built(**{k: v for k, v in values.items() if k != "pool_slots"}, colour="red")
    fewer = {k: v for k, v in values.items() if k not in ("pool", "pool_slots")}
    assert _built(**fewer) == dataclasses.replace(made, pool=None, pool_slots=1)
