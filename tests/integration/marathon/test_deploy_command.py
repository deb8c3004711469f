"""The Marathon deploy command against a fake of Marathon's REST API and fake replicas."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.marathon.__main__ import main
from deploy.marathon.artifact import PROJECT_ROOT, build_artifact
from deploy.marathon.template import AppSpec, render
from tests.integration.marathon.fake_marathon import MarathonState, Served

FAST = ["--poll-interval", "0.02", "--timeout", "10"]


@pytest.fixture
def served() -> Iterator[Served]:
    servers = Served()
    yield servers
    servers.close()


@pytest.fixture
def cluster(served: Served) -> tuple[str, MarathonState, str]:
    """A fake Marathon whose tasks point at a leader and a standby; returns url, state, leader."""
    leader = served.health("leader")
    standby = served.health("standby")
    leader.leader = standby.leader = leader.address
    state = MarathonState(
        task_addresses=[("127.0.0.1", s.server_address[1]) for s in (leader, standby)]
    )
    return served.marathon(state), state, leader.address


def _args(url: str, *extra: str) -> list[str]:
    return [
        "--marathon", url,
        "--zk", "zk1:2181,zk2:2181",
        "--mesos", "zk://zk1:2181/mesos",
        "--artifact-url", "http://files.example/ejcloud.tar.gz",
        *FAST,
        *extra,
    ]  # fmt: skip


def test_rendered_app_has_every_field_marathon_needs() -> None:
    spec = AppSpec(
        zk_servers="zk1:2181",
        mesos_url="zk://zk1:2181/mesos",
        artifact_url="http://files.example/a.tar.gz",
        instances=3,
        cpus=0.25,
        mem_mb=256,
        env={"zk_namespace": "ejc", "zk_digest": "u:p"},
    )
    app = json.loads(json.dumps(render(spec)))
    assert app["id"] == "/ejcloud-scheduler"
    assert (app["instances"], app["cpus"], app["mem"]) == (3, 0.25, 256)
    assert "http_port=$PORT0" in app["cmd"] and "hostname=$HOST" in app["cmd"]
    assert "run-scheduler" in app["cmd"]
    assert len(app["portDefinitions"]) == 1
    assert ["hostname", "UNIQUE"] in app["constraints"]
    (check,) = app["healthChecks"]
    assert check["protocol"] in ("MESOS_HTTP", "HTTP")
    assert (check["path"], check["portIndex"]) == ("/health", 0)
    assert app["upgradeStrategy"]["minimumHealthCapacity"] >= 0.5
    assert app["upgradeStrategy"]["maximumOverCapacity"] <= 1
    assert app["fetch"] == [
        {"uri": "http://files.example/a.tar.gz", "extract": True, "executable": False,
         "cache": False}
    ]  # fmt: skip
    assert app["env"]["zk_servers"] == "zk1:2181"
    assert app["env"]["mesos_url"] == "zk://zk1:2181/mesos"
    assert app["env"]["zk_namespace"] == "ejc"
    assert "hostname" not in app["env"] and "http_port" not in app["env"]
    assert "localhost" not in json.dumps(app)
    assert "{{" not in json.dumps(app)


def test_dry_run_prints_the_json_and_contacts_nobody(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_args("http://127.0.0.1:1", "--dry-run", "--image", "python:3.11-bookworm"))
    assert code == 0
    app = json.loads(capsys.readouterr().out)
    assert app["container"] == {"type": "MESOS", "docker": {"image": "python:3.11-bookworm"}}


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--instances", "1"], "--instances 1: at least 2"),
        (["--zk", "localhost:2181"], "--zk 'localhost:2181' names localhost"),
        (["--env", "http_port=80"], "--env http_port: set by Marathon"),
        (["--env", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_bad_options_exit_1_naming_the_problem(
    capsys: pytest.CaptureFixture[str], extra: list[str], problem: str
) -> None:
    assert main(_args("http://127.0.0.1:1", "--dry-run", *extra)) == 1
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1


def test_new_app_is_created_and_the_leader_reported(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, leader = cluster
    assert main(_args(url)) == 0
    out = capsys.readouterr().out
    assert ("POST", "/v2/apps") in state.requests
    assert not any(method == "PUT" for method, _ in state.requests)
    assert state.polls >= 3  # waited until the deployment list emptied
    assert "deployed /ejcloud-scheduler (deployment dep-1)" in out
    assert f"instance {leader} leader" in out
    assert out.count(" standby") == 1
    assert out.rstrip().endswith(f"leader {leader}")
    sent = state.apps["/ejcloud-scheduler"]
    assert sent["env"]["zk_servers"] == "zk1:2181,zk2:2181"


def test_existing_app_is_updated_with_put_after_409(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, leader = cluster
    state.apps["/ejcloud-scheduler"] = {"id": "/ejcloud-scheduler", "instances": 2, "cpus": 1}
    assert main(_args(url, "--cpus", "0.75")) == 0
    assert ("PUT", "/v2/apps/ejcloud-scheduler") in state.requests
    assert state.apps["/ejcloud-scheduler"]["cpus"] == 0.75
    assert f"leader {leader}" in capsys.readouterr().out


def test_rejected_definition_shows_marathons_message_and_details(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    state.reject = True
    assert main(_args(url)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Marathon rejected app /ejcloud-scheduler (422): Object is not valid" in err
    assert "/cpus: error.min" in err and "/constraints(0): Invalid constraint" in err


def test_unreachable_marathon_exits_1_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(_args(f"http://127.0.0.1:{port}")) == 1
    err = capsys.readouterr().err
    assert f"cannot reach Marathon at http://127.0.0.1:{port}" in err
    assert err.count("\n") == 1


def test_deployment_that_never_finishes_times_out(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    state.never_finish = True
    assert main([*_args(url), "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "deployment of /ejcloud-scheduler did not finish after 0.5s" in err
    assert state.polls >= 2


def test_healthy_app_without_a_leader_is_an_error(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    standbys = [served.health("standby"), served.health("standby")]
    state = MarathonState(
        task_addresses=[("127.0.0.1", s.server_address[1]) for s in standbys], polls_until_done=0
    )
    assert main([*_args(served.marathon(state)), "--timeout", "0.5"]) == 1
    assert "no instance reports role leader" in capsys.readouterr().err


def test_command_as_a_subprocess_builds_the_artifact_and_deploys(
    cluster: tuple[str, MarathonState, str], tmp_path: Path
) -> None:
    url, state, leader = cluster
    out = tmp_path / "ejc.tar.gz"
    argv = [a for a in _args(url) if not a.startswith(("--artifact-url", "http://files"))]
    result = subprocess.run(
        [sys.executable, "-m", "deploy.marathon", *argv, "--artifact-out", str(out)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"leader {leader}" in result.stdout
    assert out.is_file()
    assert state.apps["/ejcloud-scheduler"]["fetch"][0]["uri"] == out.resolve().as_uri()


def test_artifact_holds_the_sources_and_a_runnable_start_script(tmp_path: Path) -> None:
    path = build_artifact(tmp_path / "a.tar.gz")
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        assert tar.getmember("ejcloud/bin/run-scheduler").mode & 0o111
        tar.extractall(tmp_path / "x", filter="data")
    for name in ("scheduler/__main__.py", "executor/__main__.py", "deploy/marathon/__main__.py",
                 "pyproject.toml", "README.md"):  # fmt: skip
        assert f"ejcloud/{name}" in names
    assert not any("__pycache__" in n for n in names)
    script = tmp_path / "x" / "ejcloud" / "bin" / "run-scheduler"
    env = {**os.environ, "EJC_PYTHON": sys.executable, "hostname": "agent1.example"}
    ok = subprocess.run([script, "--help"], env=env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert "zk_servers" in ok.stdout
    env["hostname"] = "localhost"
    refused = subprocess.run([script], env=env, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2
    assert "hostname is 'localhost'" in refused.stderr
