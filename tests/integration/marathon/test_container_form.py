"""The container form of the Marathon app (`--container-image`): the scheduler's own image run by
the Docker containerizer on the agents' network, checked against Marathon's app rules
(`app_schema`, which the fake Marathon also applies to every app it is sent) and deployed.

tests/integration/container/test_image.py starts replicas from the image exactly as this
definition describes them (its `cmd`, `env` and secrets) and sees them elect, run a job and hand
over on SIGTERM.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from marathon.__main__ import main
from marathon.template import IMAGE_START, AppSpec, render
from tests.integration.marathon import app_schema
from tests.integration.marathon.fake_marathon import FakeReplica, MarathonState, Served

IMAGE = "registry.example:5000/ejcloud/ejcloud-scheduler:0.1.0"
SECRETS = {
    "auth_admin_password_hash": "/ejcloud/admin_password_hash",
    "auth_guest_password_hash": "/ejcloud/guest_password_hash",
    "zk_digest": "/ejcloud/zk_digest",
}
BASE = [
    "--zk", "zk1:2181,zk2:2181",
    "--mesos", "zk://zk1:2181/mesos",
    "--poll-interval", "0.02",
    "--timeout", "10",
    "--admin-password-hash-secret", SECRETS["auth_admin_password_hash"],
    "--guest-password-hash-secret", SECRETS["auth_guest_password_hash"],
    "--secret", f"zk_digest={SECRETS['zk_digest']}",
]  # fmt: skip


def _spec(**extra: object) -> AppSpec:
    fields: dict[str, object] = {
        "zk_servers": "zk1:2181",
        "mesos_url": "zk://zk1:2181/mesos",
        "artifact_url": "",
        "container_image": IMAGE,
        "secrets": SECRETS,
        **extra,
    }
    return AppSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def served() -> Iterator[Served]:
    servers = Served()
    yield servers
    servers.close()


def test_the_container_form_runs_the_image_on_the_host_network_and_passes_marathons_rules() -> None:
    app = json.loads(json.dumps(render(_spec())))
    assert app_schema.problems(app) == []
    assert app["container"] == {
        "type": "DOCKER",
        "docker": {"image": IMAGE, "forcePullImage": False},
        "volumes": [],
    }
    assert app["networks"] == [{"mode": "host"}]
    # Nothing fetched; the image's entry point on its PATH, with Marathon's address and port.
    assert "fetch" not in app
    assert app["cmd"].startswith("export http_port=$PORT0 hostname=$HOST && exec ")
    assert f"exec {IMAGE_START} --require_zk_digest true" in app["cmd"]
    assert "run-scheduler" not in app["cmd"]
    # One port on the agent, health-checked by Mesos; no sandbox install to wait for.
    assert app["portDefinitions"] == [{"port": 0, "protocol": "tcp", "name": "http"}]
    (check,) = app["healthChecks"]
    assert (check["protocol"], check["path"], check["portIndex"]) == ("MESOS_HTTP", "/health", 0)
    assert check["gracePeriodSeconds"] <= 60
    # SIGTERM hands over; Marathon waits this long before SIGKILL.
    assert app["taskKillGracePeriodSeconds"] >= 20


def test_both_forms_give_the_replicas_the_same_settings_and_secrets() -> None:
    container = render(_spec(env={"zk_namespace": "ejc"}))
    artifact = render(
        _spec(env={"zk_namespace": "ejc"}, container_image=None, artifact_url="https://f/a.tgz")
    )
    assert container["env"] == artifact["env"]
    assert container["secrets"] == artifact["secrets"]
    assert container["cmd"] == artifact["cmd"].replace("./ejcloud/bin/run-scheduler", IMAGE_START)
    assert app_schema.problems(artifact) == []
    for key, value in container["env"].items():
        if key in SECRETS:
            assert value == {"secret": key}


def test_marathons_rules_refuse_what_marathon_refuses() -> None:
    """The checker is not a rubber stamp: each broken field of the container form is named."""
    app = json.loads(json.dumps(render(_spec())))
    app["container"]["type"] = "RKT"
    app["container"]["docker"]["network"] = "HOST"
    app["container"]["portMappings"] = [{"containerPort": 8899}]
    app["args"] = ["--help"]
    app["cpus"] = 0
    app["healthChecks"][0]["protocol"] = "GRPC"
    app["env"]["bad name"] = "x"
    app["unknownField"] = True
    paths = {d["path"] for d in app_schema.problems(app)}
    assert {
        "/container/type",
        "/container/docker/network",
        "/container/portMappings",
        "/",
        "/cpus",
        "/healthChecks(0)/protocol",
        "/env/bad name",
        "/unknownField",
        "/portDefinitions",
    } <= paths
    del app["container"]["docker"]
    app["container"]["type"] = "DOCKER"
    assert "/container/docker" in {d["path"] for d in app_schema.problems(app)}


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--image", "python:3.11-bookworm"], "--image and --container-image"),
        (["--container-image", "Bad Image!"], "is not an image reference"),
        (["--container-image", "reg.example/x:1;rm -rf /"], "is not an image reference"),
    ],
)
def test_bad_container_options_exit_1_naming_the_problem(
    capsys: pytest.CaptureFixture[str], extra: list[str], problem: str
) -> None:
    args = ["--marathon", "http://127.0.0.1:1", *BASE, "--dry-run"]
    if extra[0] == "--image":
        args += ["--container-image", IMAGE]
    assert main([*args, *extra], environ={}) == 1
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1


def test_the_container_image_excludes_an_artifact(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            ["--marathon", "http://127.0.0.1:1", *BASE, "--container-image", IMAGE,
             "--artifact-url", "https://files.example/a.tgz", "--dry-run"],
            environ={},
        )  # fmt: skip
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_container_form_is_deployed_and_the_leader_reported(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    leader: FakeReplica = served.health("leader")
    standby: FakeReplica = served.health("standby")
    leader.leader = standby.leader = leader.address
    state = MarathonState(
        task_addresses=[("127.0.0.1", r.server_address[1]) for r in (leader, standby)]
    )
    url = served.marathon(state)
    code = main(["--marathon", url, *BASE, "--container-image", IMAGE], environ={})
    out = capsys.readouterr().out
    assert code == 0, out
    assert "artifact" not in out  # nothing built
    assert f"\nleader {leader.address}\n" in out
    sent = state.apps["/ejcloud-scheduler"]
    assert sent["container"]["docker"]["image"] == IMAGE
    assert sent["networks"] == [{"mode": "host"}]
    assert app_schema.problems(sent) == []
