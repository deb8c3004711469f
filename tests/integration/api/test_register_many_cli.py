"""`ejcloud job add -f FILE` with a file of many jobs (issue 29), against the real API over HTTP
on a real ZooKeeper (the CLI in-process, the leader's Flask app served on a loopback port: the
`served` fixture of the calendar CLI's tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from scheduler.storage import layout
from tests.integration.api.test_calendars_cli import Served, served
from tests.support.bodies import app_body, job_body

__all__ = ["served"]  # the fixture, used by name


def _jobs(count: int, prefix: str = "many", **fields: Any) -> list[dict[str, Any]]:
    return [job_body(f"{prefix}_{n:05d}", appName="many_app", **fields) for n in range(count)]


def _with_app(served: Served) -> Served:
    assert served.api.call("POST", "/api/app", app_body("many_app")).status_code == 204
    return served


def _stored(served: Served) -> list[str]:
    return served.api.registry.children(layout.JOBS)


def test_a_json_array_of_many_jobs_is_registered_in_batches_of_1000(
    served: Served, tmp_path: Path
) -> None:
    _with_app(served)
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(_jobs(2345)))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 0, ran.err
    assert "2345 jobs registered" in ran.out
    assert "1000 of 2345 jobs registered" in ran.err  # progress, batch by batch
    assert _stored(served) == [f"many_{n:05d}" for n in range(2345)]
    # --json tells the count.
    spec.write_text(json.dumps({"jobs": _jobs(2, "json")}))
    ran = served.run("job", "add", "-f", str(spec), "--json")
    assert json.loads(ran.out) == {"ok": True, "action": "registered", "count": 2}


def test_a_yaml_file_of_jobs_and_stdin_are_read_too(served: Served, tmp_path: Path) -> None:
    _with_app(served)
    spec = tmp_path / "jobs.yaml"
    spec.write_text(yaml.safe_dump({"jobs": _jobs(3, "yaml")}))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 0 and "3 jobs registered" in ran.out, ran.err
    ran = served.run("job", "add", "-f", "-", stdin=json.dumps(_jobs(2, "piped")))
    assert ran.code == 0 and "2 jobs registered" in ran.out, ran.err
    # One job on stdin is one registration, as before.
    ran = served.run("job", "add", "-f", "-", stdin=json.dumps(job_body("one", appName="many_app")))
    assert ran.code == 0 and "job one registered" in ran.out, ran.err
    assert len(_stored(served)) == 6


def test_a_refused_batch_stops_and_says_what_the_earlier_ones_registered(
    served: Served, tmp_path: Path
) -> None:
    _with_app(served)
    jobs = _jobs(2500)
    jobs[1500]["cron"] = "not a cron"
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(jobs))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 1
    assert "jobs #1000 to #1999 refused, none of them registered" in ran.err
    assert "the 1000 jobs before it (#0 to #999) were registered" in ran.err
    assert "#1500 'many_01500'" in ran.err and "cron" in ran.err
    assert "1500 of the 2500 jobs not registered" in ran.err
    assert _stored(served) == [f"many_{n:05d}" for n in range(1000)]
    # Sent again, the first batch is a 409 naming the jobs that exist (exit 6).
    jobs[1500]["cron"] = "0 0 3 * * ?"
    spec.write_text(json.dumps(jobs))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 6 and "#0 'many_00000': job 'many_00000' already exists" in ran.err


def test_large_jobs_go_in_smaller_batches(served: Served, tmp_path: Path) -> None:
    _with_app(served)
    # ~1.4 KiB stored each: 1,000 of them fit neither one transaction nor one request body.
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(_jobs(1200, jobParameter="p" * 900)))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 0, ran.err
    assert "1200 jobs registered" in ran.out
    assert len(_stored(served)) == 1200


def test_a_name_or_flags_with_many_jobs_is_a_usage_error(served: Served, tmp_path: Path) -> None:
    _with_app(served)
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(_jobs(2)))
    for extra in (["some_name"], ["--cron", "0 0 3 * * ?"], ["--set", "misfire=true"]):
        ran = served.run("job", "add", *extra, "-f", str(spec))
        assert ran.code == 2, (extra, ran.err)
        assert "holds 2 jobs" in ran.err
    spec.write_text(json.dumps({"jobs": []}))
    assert served.run("job", "add", "-f", str(spec)).code == 2
    spec.write_text(json.dumps([job_body("a"), "b"]))
    ran = served.run("job", "add", "-f", str(spec))
    assert ran.code == 2 and "job #1 is not an object" in ran.err
    assert _stored(served) == []
