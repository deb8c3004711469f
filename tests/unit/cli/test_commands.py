"""The command line itself: help, usage errors (exit code 2, nothing sent) and `package`."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.unit.cli.conftest import Run

# Nothing listens here: a command that reached the network would fail with exit code 3.
NOWHERE = {"EJCLOUD_SERVER": "127.0.0.1:9", "EJCLOUD_USER": "u", "EJCLOUD_PASSWORD": "p"}


def test_help_lists_every_command(run: Run) -> None:
    ran = run("--help")
    assert ran.code == 0
    for command in ("app", "job", "runs", "logs", "status", "package", "config"):
        assert f"\n  {command} " in ran.out
    job_help = run("job", "--help").out
    for command in ("list", "show", "add", "update", "enable", "disable", "trigger", "kill"):
        assert f"\n  {command} " in job_help
    assert "\n  delete " in job_help and "\n  next " in job_help
    app_help = run("app", "--help").out
    for command in ("list", "show", "add", "update", "enable", "disable", "delete"):
        assert f"\n  {command} " in app_help


def test_version(run: Run) -> None:
    ran = run("--version")
    assert ran.code == 0 and ran.out.startswith("ejcloud, version ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nosuch",), "No such command 'nosuch'"),
        (("job", "show"), "Missing argument 'NAME'"),
        (("job", "next", "j", "--count", "0"), "0 is not in the range 1<=x<=100"),
        (("job", "add", "j", "--type", "JAVA"), "'JAVA' is not one of"),
        (("job", "add", "j", "--shards", "two"), "'two' is not a valid integer"),
        (("runs", "j", "--limit", "0"), "0 is not in the range"),
        (("--timeout", "soon", "job", "list"), "'soon' is not a valid float"),
    ],
)
def test_click_usage_errors_exit_2(run: Run, args: tuple[str, ...], message: str) -> None:
    ran = run(*args, env=NOWHERE)
    assert ran.code == 2 and message in ran.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("job", "add", "j", "--set", "oops"), "--set takes FIELD=VALUE, not 'oops'"),
        (("job", "add", "--cron", "x"), "give the name as an argument or as jobName"),
        (("job", "update", "j"), "nothing to update"),
        (("app", "update", "a"), "nothing to update"),
        (("app", "add", "a", "-f", "/nonexistent/app.yaml"), "cannot read /nonexistent/app.yaml"),
        (("logs", "not-a-task-id"), "is not a task id"),
        (("--server", "ftp://h", "job", "list"), "--server: 'ftp://h' is not an http://"),
        (("--timeout", "0", "job", "list"), "--timeout must be more than 0"),
    ],
)
def test_our_usage_errors_exit_2_before_anything_is_sent(
    run: Run, args: tuple[str, ...], message: str
) -> None:
    ran = run(*args, env=NOWHERE)
    assert ran.code == 2, ran.err
    assert ran.err.startswith("ejcloud: error: ") and message in ran.err.splitlines()[0]
    assert ran.out == ""


def test_the_name_must_agree_with_the_file_on_stdin(run: Run) -> None:
    ran = run("app", "add", "a", "-f", "-", stdin='{"appName": "b"}', env=NOWHERE)
    assert ran.code == 2
    assert "the name 'a' differs from appName 'b'" in ran.err


def test_usage_errors_are_json_on_stderr_with_json(run: Run) -> None:
    ran = run("--json", "job", "add", "j", "--set", "x", env=NOWHERE)
    assert ran.code == 2
    assert json.loads(ran.err) == {
        "error": "--set takes FIELD=VALUE, not 'x'",
        "type": "UsageProblem",
        "exitCode": 2,
    }


def test_a_request_nobody_answers_exits_3(run: Run) -> None:
    ran = run("job", "list", env=NOWHERE)
    assert ran.code == 3
    assert (
        ran.err.strip() == "ejcloud: error: cannot connect: http://127.0.0.1:9: connection refused"
    )


def test_package_builds_the_archive_as_executor_package_does(run: Run, tmp_path: Path) -> None:
    src = tmp_path / "app"
    (src / "demo").mkdir(parents=True)
    (src / "demo" / "jobs.py").write_text("def hello(ctx):\n    print('hi')\n")
    out = tmp_path / "app.tar.gz"
    ran = run("package", str(src), str(out), "--python", "/usr/bin/python3")
    assert ran.code == 0, ran.err
    assert ran.out.splitlines() == [
        f"wrote {out} (2 files)",
        f"  appURL:          {out.resolve().as_uri()}",
        "  bootstrapScript: bin/start.sh",
    ]
    with tarfile.open(out) as archive:
        assert sorted(archive.getnames()) == ["bin/start.sh", "demo/jobs.py"]
        start = archive.extractfile("bin/start.sh")
        assert start is not None and b"python=/usr/bin/python3" in start.read()


def test_package_refuses_what_executor_package_refuses(run: Run, tmp_path: Path) -> None:
    src = tmp_path / "app"
    (src / "executor").mkdir(parents=True)
    ran = run("package", str(src), str(tmp_path / "x.tar.gz"))
    assert ran.code == 2 and "package:" in ran.err and "executor" in ran.err
