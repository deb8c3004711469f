"""`ejcloud workflow ...` without a server: its commands, usage errors (exit code 2, nothing
sent) and how the body is built from a file and flags. What the server does with them is proved
end to end in tests/e2e/test_workflows.py."""

from __future__ import annotations

import pytest

from ejcloud_cli.workflows import _body, _render_run
from tests.unit.cli.conftest import Run

# Nothing listens here: a command that reached the network would fail with exit code 3.
NOWHERE = {"EJCLOUD_SERVER": "127.0.0.1:9", "EJCLOUD_USER": "u", "EJCLOUD_PASSWORD": "p"}
COMMANDS = (
    "add", "update", "show", "list", "enable", "disable", "delete",
    "trigger", "runs", "run", "cancel", "retry", "mark-success",
)  # fmt: skip


def test_help_lists_every_workflow_command(run: Run) -> None:
    assert "\n  workflow " in run("--help").out
    listed = run("workflow", "--help").out
    for command in COMMANDS:
        assert f"\n  {command} " in listed, command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("workflow", "add", "--cron", "x"), "give the name as an argument or as workflowName"),
        (("workflow", "update", "w"), "nothing to update"),
        (("workflow", "add", "w", "--set", "oops"), "--set takes FIELD=VALUE, not 'oops'"),
        (("workflow", "add", "w", "-f", "/nonexistent/w.yaml"), "cannot read /nonexistent/w.yaml"),
    ],
)
def test_usage_errors_exit_2_before_anything_is_sent(
    run: Run, args: tuple[str, ...], message: str
) -> None:
    ran = run(*args, env=NOWHERE)
    assert ran.code == 2, ran.err
    assert ran.err.startswith("ejcloud: error: ") and message in ran.err.splitlines()[0]


def test_click_checks_the_run_arguments_and_limits(run: Run) -> None:
    assert "Missing argument 'NODE'" in run("workflow", "mark-success", "w", "r", env=NOWHERE).err
    assert run("workflow", "runs", "w", "-n", "0", env=NOWHERE).code == 2
    assert run("workflow", "add", "w", "--overlap", "REPLACE", env=NOWHERE).code == 2


def test_a_yaml_file_becomes_the_body_flags_win_and_shown_only_fields_are_dropped(
    run: Run,
) -> None:
    spec = """
workflowName: nightly
appName: demo_app
enabled: true
cron: 0 0 2 * * ?
nodes:
  - {name: a, job: extract}
  - {name: b, job: load, dependsOn: [a], condition: on_done}
"""
    ran = run(
        "workflow", "add", "nightly", "-f", "-", "--fail-fast", "--cron", "",
        stdin=spec, env=NOWHERE,
    )  # fmt: skip
    # The body was complete (the only failure is that nobody listens).
    assert ran.code == 3, ran.err


class _Stdin:
    def __init__(self, text: str) -> None:
        self.text = text.encode()

    def read(self, size: int) -> bytes:
        return self.text[:size]


class _State:
    def __init__(self, text: str) -> None:
        self._stdin = _Stdin(text)

    def stdin(self) -> _Stdin:
        return self._stdin


def test_the_body_lays_flags_over_the_file() -> None:
    state = _State('{"workflowName": "w", "enabled": false, "cron": "0 * * * * ?", "nodes": []}')
    body = _body(
        state,  # type: ignore[arg-type]
        "w",
        "-",
        sets=("description=nightly load",),
        app_name="demo_app",
        cron="",
        time_zone=None,
        fail_fast=True,
        misfire=None,
        overlap="allow",
        timeout_s=None,
        description=None,
    )
    assert body == {
        "workflowName": "w",
        "cron": "",
        "nodes": [],
        "description": "nightly load",
        "appName": "demo_app",
        "failFast": True,
        "overlapPolicy": "ALLOW",
    }


def test_a_run_is_rendered_with_a_line_per_node() -> None:
    text = _render_run(
        {
            "runId": "r1",
            "state": "failed",
            "fireTime": "2026-01-01T00:00:00Z",
            "startedAt": "2026-01-01T00:00:00Z",
            "endedAt": "2026-01-01T00:00:05Z",
            "nodes": [
                {
                    "name": "a",
                    "state": "succeeded",
                    "taskIds": ["t1", "t2"],
                    "startedAt": "2026-01-01T00:00:00Z",
                    "endedAt": "2026-01-01T00:00:02Z",
                    "reason": None,
                },
                {"name": "b", "state": "skipped", "taskIds": [], "reason": "upstream_failed\x1b"},
            ],
        }
    )
    lines = text.splitlines()
    assert "duration:  5.00s" in lines
    assert lines[-2].split() == ["a", "succeeded", "2026-01-01", "00:00:00", "2.00s", "2", "-"]
    assert lines[-1].split() == ["b", "skipped", "-", "-", "0", "upstream_failed\\x1b"]
