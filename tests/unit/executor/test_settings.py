from __future__ import annotations

from pathlib import Path

import pytest

from executor.supervisor import (
    DEFAULT_KILL_GRACE_S,
    ExecutorSettings,
    _kill_grace_s,
    local_ip,
    worker_environment,
)
from executor.taskdata import executor_id, executor_info


def test_the_app_dir_comes_from_the_option_then_the_environment(tmp_path: Path) -> None:
    a, b, c = (tmp_path / name for name in "abc")
    for path in (a, b, c):
        path.mkdir()
    env = {"EJC_APP_DIR": str(b), "MESOS_SANDBOX": str(c)}
    assert ExecutorSettings.from_environment(env, app_dir=str(a)).app_dir == a
    assert ExecutorSettings.from_environment(env).app_dir == b
    assert ExecutorSettings.from_environment({"MESOS_SANDBOX": str(c)}).app_dir == c
    assert ExecutorSettings.from_environment({"MESOS_DIRECTORY": str(a)}).app_dir == a
    assert ExecutorSettings.from_environment({}).app_dir == Path.cwd().resolve()


def test_the_kill_grace_comes_from_the_option_then_the_environment(tmp_path: Path) -> None:
    env = {"EJC_APP_DIR": str(tmp_path)}
    assert ExecutorSettings.from_environment(env).kill_grace_s == DEFAULT_KILL_GRACE_S
    env["EJC_KILL_GRACE_SECONDS"] = "1.5"
    assert ExecutorSettings.from_environment(env).kill_grace_s == 1.5
    assert ExecutorSettings.from_environment(env, kill_grace_s=0.0).kill_grace_s == 0.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EJC_APP_DIR": "/no/such/dir"}, "does not exist"),
        ({"EJC_KILL_GRACE_SECONDS": "soon"}, "EJC_KILL_GRACE_SECONDS"),
        ({"EJC_KILL_GRACE_SECONDS": "-1"}, ">= 0"),
    ],
)
def test_bad_settings_are_refused_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutorSettings.from_environment(env)


def test_a_task_kill_policy_overrides_the_default_grace() -> None:
    task = {"kill_policy": {"grace_period": {"nanoseconds": 1_500_000_000}}}
    assert _kill_grace_s(task, 3.0) == 1.5
    assert _kill_grace_s({}, 3.0) == 3.0
    assert _kill_grace_s({"kill_policy": {"grace_period": {"nanoseconds": "x"}}}, 3.0) == 3.0


def test_workers_get_the_app_dir_and_unbuffered_output(tmp_path: Path) -> None:
    env = worker_environment({"PATH": "/bin", "PYTHONPATH": "/x"}, tmp_path)
    assert env == {
        "PATH": "/bin",
        "PYTHONPATH": "/x",
        "EJC_APP_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }


def test_the_ip_comes_from_libprocess_then_the_agent_endpoint() -> None:
    assert local_ip({"LIBPROCESS_IP": "10.1.1.1", "MESOS_AGENT_ENDPOINT": "10.2.2.2:5051"}) == (
        "10.1.1.1"
    )
    assert local_ip({"MESOS_AGENT_ENDPOINT": "10.2.2.2:5051"}) == "10.2.2.2"


def test_the_executor_info_of_an_app_on_an_agent() -> None:
    info = executor_info(
        app_name="demo",
        agent_id="S1",
        app_url="http://files/demo.tar.gz",
        bootstrap_script="bin/start.sh",
        cpus=0.5,
        mem_mb=64,
        cache=False,
        role="jobs",
    )
    assert executor_id("demo", "S1") == "demo@-@S1"
    assert info["executor_id"] == {"value": "demo@-@S1"}
    assert info["command"] == {
        "value": "bin/start.sh",
        "shell": True,
        "uris": [{"value": "http://files/demo.tar.gz", "extract": True, "cache": False}],
    }
    assert info["resources"] == [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.5}, "role": "jobs"},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": 64}, "role": "jobs"},
    ]


def test_the_sandbox_for_task_output_comes_from_mesos_sandbox_then_mesos_directory(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    env = {"EJC_APP_DIR": str(tmp_path)}
    assert ExecutorSettings.from_environment(env).sandbox is None
    both = {**env, "MESOS_SANDBOX": str(a), "MESOS_DIRECTORY": str(b)}
    assert ExecutorSettings.from_environment(both).sandbox == a
    assert ExecutorSettings.from_environment({**env, "MESOS_DIRECTORY": str(b)}).sandbox == b
    # A sandbox that is not there: no files of their own, not an executor that cannot start.
    missing = {**env, "MESOS_SANDBOX": str(tmp_path / "gone")}
    assert ExecutorSettings.from_environment(missing).sandbox is None
