"""The Marathon deploy command against a fake of Marathon's REST API and fake replicas."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from marathon.__main__ import main
from marathon.artifact import PROJECT_ROOT, build_artifact
from marathon.template import AppSpec, render
from tests.integration.marathon.fake_marathon import FakeReplica, MarathonState, Served

FAST = ["--poll-interval", "0.02", "--timeout", "10"]
# Where the (fake) cluster's secret store holds the hashes; the command only refers to them.
SECURE = [
    "--admin-password-hash-secret", "/ejcloud/admin_password_hash",
    "--guest-password-hash-secret", "/ejcloud/guest_password_hash",
]  # fmt: skip
# Where it holds zk_digest: without one the command refuses (unless --insecure-zk).
DIGEST = ["--secret", "zk_digest=/ejcloud/zk_digest"]
ADMIN_HASH = generate_password_hash("admin-s3cret-1")
GUEST_HASH = generate_password_hash("guest-s3cret-2")


@pytest.fixture
def served() -> Iterator[Served]:
    servers = Served()
    yield servers
    servers.close()


@pytest.fixture
def replicas(served: Served) -> tuple[FakeReplica, FakeReplica]:
    """A leader and a standby; their REST API accepts no default login."""
    leader = served.health("leader")
    standby = served.health("standby")
    leader.leader = standby.leader = leader.address
    return leader, standby


@pytest.fixture
def cluster(
    served: Served, replicas: tuple[FakeReplica, FakeReplica]
) -> tuple[str, MarathonState, str]:
    """A fake Marathon whose tasks point at `replicas`; returns url, state, leader address."""
    state = MarathonState(task_addresses=[("127.0.0.1", r.server_address[1]) for r in replicas])
    return served.marathon(state), state, replicas[0].address


def _args(url: str, *extra: str) -> list[str]:
    return [
        "--marathon", url,
        "--zk", "zk1:2181,zk2:2181",
        "--mesos", "zk://zk1:2181/mesos",
        "--artifact-url", "https://files.example/ejcloud.tar.gz",
        *FAST,
        *SECURE,
        *DIGEST,
        *extra,
    ]  # fmt: skip


def _insecure_args(url: str, *extra: str) -> list[str]:
    """`_args` without the secret sources (hashes and zk_digest), with --insecure and
    --insecure-zk."""
    plain = _args(url, "--insecure", "--insecure-zk", *extra)
    for option in SECURE[::2]:
        at = plain.index(option)
        del plain[at : at + 2]
    at = plain.index(DIGEST[1])
    del plain[at - 1 : at + 1]
    return plain


def _no_secret_values(app: dict[str, Any], *values: str) -> None:
    text = json.dumps(app)
    for value in values:
        assert value not in text
    for key, value in app["env"].items():
        if "password" in key or key in ("zk_digest", "framework_secret"):
            assert value == {"secret": key}


def test_rendered_app_has_every_field_marathon_needs() -> None:
    spec = AppSpec(
        zk_servers="zk1:2181",
        mesos_url="zk://zk1:2181/mesos",
        artifact_url="https://files.example/a.tar.gz",
        instances=3,
        cpus=0.25,
        mem_mb=256,
        env={"zk_namespace": "ejc"},
        secrets={
            "auth_admin_password_hash": "/ejc/admin",
            "auth_guest_password_hash": "/ejc/guest",
            "zk_digest": "/ejc/zk_digest",
        },
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
        {"uri": "https://files.example/a.tar.gz", "extract": True, "executable": False,
         "cache": False}
    ]  # fmt: skip
    assert app["env"]["zk_servers"] == "zk1:2181"
    assert app["env"]["mesos_url"] == "zk://zk1:2181/mesos"
    assert app["env"]["zk_namespace"] == "ejc"
    assert "hostname" not in app["env"] and "http_port" not in app["env"]
    # Secrets: Marathon's `secrets` field names the store's sources, env refers to them.
    assert app["secrets"] == {
        "auth_admin_password_hash": {"source": "/ejc/admin"},
        "auth_guest_password_hash": {"source": "/ejc/guest"},
        "zk_digest": {"source": "/ejc/zk_digest"},
    }
    for name in app["secrets"]:
        assert app["env"][name] == {"secret": name}
    assert "localhost" not in json.dumps(app)
    assert "{{" not in json.dumps(app)


def test_dry_run_prints_the_json_and_contacts_nobody(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        _args("http://127.0.0.1:1", "--dry-run", "--image", "python:3.11-bookworm"), environ={}
    )
    assert code == 0
    captured = capsys.readouterr()
    app = json.loads(captured.out)
    assert app["container"] == {"type": "MESOS", "docker": {"image": "python:3.11-bookworm"}}
    assert "WARNING" not in captured.err


def test_dry_run_shows_secret_references_never_the_hashes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guest_file = tmp_path / "guest.hash"
    guest_file.write_text(GUEST_HASH + "\n")
    argv = _args(
        "http://127.0.0.1:1",
        "--dry-run",
        "--admin-password-hash", ADMIN_HASH,
        "--guest-password-hash-file", str(guest_file),
        "--secret", "zk_digest=/ejcloud/zk_digest",
        "--secret", "framework_secret=/ejcloud/mesos_secret",
    )  # fmt: skip
    assert main(argv, environ={}) == 0
    printed = capsys.readouterr().out
    app = json.loads(printed)
    assert app["secrets"] == {
        "auth_admin_password_hash": {"source": "/ejcloud/admin_password_hash"},
        "auth_guest_password_hash": {"source": "/ejcloud/guest_password_hash"},
        "framework_secret": {"source": "/ejcloud/mesos_secret"},
        "zk_digest": {"source": "/ejcloud/zk_digest"},
    }
    _no_secret_values(app, ADMIN_HASH, GUEST_HASH, ADMIN_HASH.split("$")[2])
    assert "scrypt" not in printed and "root" not in printed


def test_default_passwords_are_refused_without_insecure(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    argv = _insecure_args(url)
    argv.remove("--insecure")
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "default login root/root and guest/guest" in err
    assert "--admin-password-hash-secret SOURCE and --guest-password-hash-secret SOURCE" in err
    assert "python -m scheduler.api.auth hash" in err and "--insecure" in err
    assert state.requests == []  # Marathon never heard of it


def test_one_missing_hash_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _insecure_args("http://127.0.0.1:1", "--dry-run", *SECURE[:2])
    argv.remove("--insecure")
    assert main([*argv, "--env", "auth_guest_username=viewer"], environ={}) == 1
    err = capsys.readouterr().err
    assert "default login viewer/guest;" in err and "--guest-password-hash-secret" in err
    assert "--admin-password-hash-secret" not in err


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--env", "auth_admin_password=s3cret"], "--env auth_admin_password: plain passwords"),
        (["--env", "EJC_AUTH_GUEST_PASSWORD=x"], "--env EJC_AUTH_GUEST_PASSWORD: plain passwords"),
        (["--secret", "auth_admin_password=/a"], "--secret auth_admin_password: plain passwords"),
        (["--env", "zk_digest=u:p"], "--env zk_digest: a secret in the app's plain env"),
        (["--env", "EJC_FRAMEWORK_SECRET=s"], "give --secret framework_secret=SOURCE"),
        (["--env", f"auth_admin_password_hash={ADMIN_HASH}"], "a secret in the app's plain env"),
        (["--env", "auth_enabled=false"], "turning authentication off needs --insecure"),
        (["--env", "event_trace_rdb_url=postgresql://u:pw@db/ejc"], "plain env"),
        (["--env", "event_trace_rdb_url=jdbc:mysql://db/ejc?password=pw"], "plain env"),
        (["--secret", "zk_namespace=/a"], "--secret zk_namespace: not one of"),
        (["--secret", "zk_digest"], "expected SETTING=SOURCE"),
        (["--secret", "zk_digest=/ejcloud/admin_password_hash"], "the same secret store source"),
        (["--secret", "zk_digest=/a b"], "secret source of zk_digest: must be 1-512 printable"),
        (
            ["--secret", "auth_admin_password_hash=/other"],
            "--admin-password-hash-secret and --secret auth_admin_password_hash name different",
        ),
        (
            ["--secret", "zk_digest=/z", "--insecure", "--env", "zk_digest=u:p"],
            "zk_digest given twice",
        ),
    ],
)
def test_secrets_in_plain_env_and_auth_off_are_refused(
    capsys: pytest.CaptureFixture[str], extra: list[str], problem: str
) -> None:
    assert main(_args("http://127.0.0.1:1", "--dry-run", *extra), environ={}) == 1
    captured = capsys.readouterr()
    assert problem in captured.err and captured.err.count("\n") == 1
    assert captured.out == ""


def test_a_database_url_without_a_password_may_stay_in_the_plain_env(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _args("http://127.0.0.1:1", "--dry-run", "--secret", "event_trace_rdb_password=/db/pw")
    argv += ["--env", "event_trace_rdb_url=jdbc:postgresql://db:5432/ejc?user=ejc"]
    assert main(argv, environ={}) == 0
    app = json.loads(capsys.readouterr().out)
    assert app["env"]["event_trace_rdb_url"] == "jdbc:postgresql://db:5432/ejc?user=ejc"
    assert app["env"]["event_trace_rdb_password"] == {"secret": "event_trace_rdb_password"}


def test_plain_passwords_are_refused_even_with_insecure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _insecure_args("http://127.0.0.1:1", "--dry-run", "--env", "auth_admin_password=pw")
    assert main(argv, environ={}) == 1
    assert "plain passwords are refused" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("s3cret-password", "not a password hash"),
        ("md5$abcdefgh$00", "the method must be scrypt or pbkdf2"),
        ("scrypt$abcdefghij$" + "0" * 128, "scrypt needs its parameters"),
        ("scrypt:1024:8:1$abcdefghij$" + "0" * 128, "scrypt parameters out of range"),
        ("scrypt:1048576:8:1$abcdefghij$" + "0" * 128, "cost more than 256 MiB"),
        ("pbkdf2:sha1:600000$abcdefghij$" + "0" * 40, "pbkdf2 takes sha224, sha256"),
        ("pbkdf2:sha256:1000$abcdefghij$" + "0" * 64, "iterations must be"),
        ("scrypt:32768:8:1$a$" + "0" * 128, "the salt must be"),
        ("scrypt:32768:8:1$abcdefghij$" + "0" * 64, "the digest must be 128 lower-case hex"),
        (generate_password_hash("root"), "it is a hash of 'root'"),
        (generate_password_hash("guest", method="pbkdf2"), "it is a hash of 'guest'"),
        (generate_password_hash(""), "it is a hash of the empty password"),
    ],
)
def test_bad_password_hashes_are_refused_without_being_shown(
    capsys: pytest.CaptureFixture[str], value: str, problem: str
) -> None:
    argv = _args("http://127.0.0.1:1", "--dry-run", "--admin-password-hash", value)
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err
    assert "error: --admin-password-hash: " in err and problem in err
    assert err.count("\n") == 1
    assert value not in err


def test_a_hash_of_the_user_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _args("http://127.0.0.1:1", "--dry-run", "--env", "auth_admin_username=ops")
    argv += ["--admin-password-hash", generate_password_hash("ops")]
    assert main(argv, environ={}) == 1
    assert "--admin-password-hash: it is a hash of 'ops'" in capsys.readouterr().err


def test_a_hash_without_a_secret_source_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _insecure_args("http://127.0.0.1:1", "--dry-run")
    argv.remove("--insecure")
    environ = {"EJC_AUTH_ADMIN_PASSWORD_HASH": ADMIN_HASH}
    assert main(argv, environ=environ) == 1
    err = capsys.readouterr().err
    assert "--admin-password-hash needs --admin-password-hash-secret SOURCE" in err
    assert ADMIN_HASH not in err


def test_unreadable_or_multi_line_hash_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_lines = tmp_path / "two"
    two_lines.write_text(f"{ADMIN_HASH}\n{GUEST_HASH}\n")
    for path, problem in ((two_lines, "expected one line"), (tmp_path / "none", "cannot read")):
        argv = _args("http://127.0.0.1:1", "--dry-run", "--admin-password-hash-file", str(path))
        assert main(argv, environ={}) == 1
        err = capsys.readouterr().err
        assert f"--admin-password-hash-file {path}: {problem}" in err
        assert ADMIN_HASH not in err


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
    assert main(_args("http://127.0.0.1:1", "--dry-run", *extra), environ={}) == 1
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1


def test_new_app_is_created_and_the_leader_reported(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, leader = cluster
    assert main(_args(url), environ={}) == 0
    out = capsys.readouterr().out
    assert ("POST", "/v2/apps") in state.requests
    assert not any(method == "PUT" for method, _ in state.requests)
    assert state.polls >= 3  # waited until the deployment list emptied
    assert "deployed /ejcloud-scheduler (deployment dep-1)" in out
    assert f"instance {leader} leader" in out
    assert out.count(" standby") == 1
    assert f"\nleader {leader}\n" in out
    sent = state.apps["/ejcloud-scheduler"]
    assert sent["env"]["zk_servers"] == "zk1:2181,zk2:2181"


def test_hashes_are_checked_and_reach_the_app_only_as_secret_references(
    cluster: tuple[str, MarathonState, str],
    replicas: tuple[FakeReplica, FakeReplica],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, state, _ = cluster
    leader = replicas[0]
    guest_file = tmp_path / "guest.hash"
    guest_file.write_text(GUEST_HASH + "\n")
    argv = _args(
        url,
        "--guest-password-hash-file", str(guest_file),
        "--secret", "zk_digest=/ejcloud/zk_digest",
        "--env", "zk_namespace=ejc",
    )  # fmt: skip
    assert main(argv, environ={"EJC_AUTH_ADMIN_PASSWORD_HASH": ADMIN_HASH}) == 0
    captured = capsys.readouterr()
    assert "WARNING" not in captured.err
    app = state.apps["/ejcloud-scheduler"]
    assert app["secrets"] == {
        "auth_admin_password_hash": {"source": "/ejcloud/admin_password_hash"},
        "auth_guest_password_hash": {"source": "/ejcloud/guest_password_hash"},
        "zk_digest": {"source": "/ejcloud/zk_digest"},
    }
    assert app["env"]["auth_admin_password_hash"] == {"secret": "auth_admin_password_hash"}
    assert app["env"]["zk_namespace"] == "ejc"
    _no_secret_values(app, ADMIN_HASH, GUEST_HASH)
    # After the deployment the leader was asked to log in with each default password.
    assert leader.tried == [("root", "root"), ("guest", "guest")]
    assert "default login root/root refused by the leader" in captured.out
    assert "default login guest/guest refused by the leader" in captured.out


def test_a_leader_that_accepts_a_default_login_fails_the_deployment(
    cluster: tuple[str, MarathonState, str],
    replicas: tuple[FakeReplica, FakeReplica],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Marathon with the secrets feature but no plugin: the replicas start without the hashes.
    url, _, leader = cluster
    replicas[0].accepted_logins = {("root", "root"), ("guest", "guest")}
    assert main(_args(url), environ={}) == 1
    captured = capsys.readouterr()
    assert "deployed /ejcloud-scheduler" in captured.out
    assert captured.err.count("\n") == 1
    accepts = f"deployed, but the leader {leader} accepts the default login root/root and guest/"
    assert accepts in captured.err
    assert "--enable_features secrets and a secrets plugin" in captured.err


def test_marathon_without_the_secrets_feature_rejects_with_a_hint(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    state.enabled_features = frozenset()
    assert main(_args(url), environ={}) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Marathon rejected app /ejcloud-scheduler (422): Object is not valid" in err
    assert "/secrets: Feature secrets is not enabled" in err
    assert "this Marathon has no secret store" in err and "--insecure" in err
    assert state.apps == {}


def test_insecure_deploys_with_the_defaults_and_warns(
    cluster: tuple[str, MarathonState, str],
    replicas: tuple[FakeReplica, FakeReplica],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, state, leader_address = cluster
    replicas[0].accepted_logins = {("root", "root"), ("guest", "guest")}
    assert main(_insecure_args(url, "--env", "zk_digest=u:p"), environ={}) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "WARNING" in line]
    assert "WARNING: INSECURE deployment (--insecure --insecure-zk):" in warnings[0]
    assert any(
        "no admin password hash: the replicas accept the default login root/root" in w
        for w in warnings
    )
    assert any("default login guest/guest" in w for w in warnings)
    assert any("zk_digest is in the app's plain env" in w for w in warnings)
    assert any(
        f"the leader {leader_address} accepts the default login root/root" in w for w in warnings
    )
    assert f"leader {leader_address}" in captured.out
    app = state.apps["/ejcloud-scheduler"]
    assert app["secrets"] == {}
    assert app["env"]["zk_digest"] == "u:p"


def test_insecure_puts_a_hash_without_source_in_the_plain_env_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin_file = tmp_path / "admin.hash"
    admin_file.write_text(ADMIN_HASH)
    argv = _insecure_args(
        "http://127.0.0.1:1", "--dry-run", "--admin-password-hash-file", str(admin_file)
    )
    assert main(argv, environ={"EJC_AUTH_GUEST_PASSWORD_HASH": GUEST_HASH}) == 0
    captured = capsys.readouterr()
    app = json.loads(captured.out)
    assert app["env"]["auth_admin_password_hash"] == ADMIN_HASH
    assert app["env"]["auth_guest_password_hash"] == GUEST_HASH
    assert "auth_admin_password_hash is in the app's plain env" in captured.err
    assert "default login" not in captured.err  # both accounts have hashes


def test_insecure_with_authentication_off_warns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _insecure_args("http://127.0.0.1:1", "--dry-run", "--env", "auth_enabled=false")
    assert main(argv, environ={}) == 0
    err = capsys.readouterr().err
    assert "authentication is off: anyone who reaches /api may change and run jobs" in err


def test_existing_app_is_updated_with_put_after_409(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, leader = cluster
    state.apps["/ejcloud-scheduler"] = {"id": "/ejcloud-scheduler", "instances": 2, "cpus": 1}
    assert main(_args(url, "--cpus", "0.75"), environ={}) == 0
    assert ("PUT", "/v2/apps/ejcloud-scheduler") in state.requests
    assert state.apps["/ejcloud-scheduler"]["cpus"] == 0.75
    assert f"leader {leader}" in capsys.readouterr().out


def test_rejected_definition_shows_marathons_message_and_details(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    state.reject = True
    assert main(_args(url), environ={}) == 1
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
    assert main(_args(f"http://127.0.0.1:{port}"), environ={}) == 1
    err = capsys.readouterr().err
    assert f"cannot reach Marathon at http://127.0.0.1:{port}" in err
    assert err.count("\n") == 1


def test_deployment_that_never_finishes_times_out(
    cluster: tuple[str, MarathonState, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, state, _ = cluster
    state.never_finish = True
    assert main([*_args(url), "--timeout", "0.5"], environ={}) == 1
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
    assert main([*_args(served.marathon(state)), "--timeout", "0.5"], environ={}) == 1
    assert "no instance reports role leader" in capsys.readouterr().err


def test_command_as_a_subprocess_builds_the_artifact_and_deploys(
    cluster: tuple[str, MarathonState, str], tmp_path: Path
) -> None:
    url, state, leader = cluster
    out = tmp_path / "ejc.tar.gz"
    argv = [a for a in _args(url) if not a.startswith(("--artifact-url", "https://files"))]
    # The hash comes from the environment, so it is not on the command line (ps).
    env = {**os.environ, "EJC_AUTH_ADMIN_PASSWORD_HASH": ADMIN_HASH}
    env.pop("EJC_AUTH_GUEST_PASSWORD_HASH", None)
    result = subprocess.run(
        [sys.executable, "-m", "marathon", *argv, "--artifact-out", str(out)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"leader {leader}" in result.stdout
    assert "default login root/root refused by the leader" in result.stdout
    assert out.is_file()
    app = state.apps["/ejcloud-scheduler"]
    assert app["fetch"][0]["uri"] == out.resolve().as_uri()
    _no_secret_values(app, ADMIN_HASH)


def test_artifact_holds_the_sources_and_a_runnable_start_script(tmp_path: Path) -> None:
    path = build_artifact(tmp_path / "a.tar.gz")
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        assert tar.getmember("ejcloud/bin/run-scheduler").mode & 0o111
        tar.extractall(tmp_path / "x", filter="data")
    for name in ("scheduler/__main__.py", "executor/__main__.py", "pyproject.toml", "README.md"):
        assert f"ejcloud/{name}" in names
    # The product only: not the deploy tool, the stand-in or the test harness.
    assert not any(n.startswith(("ejcloud/marathon/", "ejcloud/deploy/")) for n in names)
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


def test_an_app_without_zk_digest_is_refused_unless_insecure_zk(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _args("http://127.0.0.1:1", "--dry-run")
    at = argv.index(DIGEST[1])
    del argv[at - 1 : at + 1]
    assert main(argv, environ={}) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "no zk_digest" in captured.err and "--secret zk_digest=SOURCE" in captured.err
    assert "--insecure-zk" in captured.err

    assert main([*argv, "--insecure-zk"], environ={}) == 0
    captured = capsys.readouterr()
    app = json.loads(captured.out)
    assert app["cmd"].endswith("run-scheduler --require_zk_digest false")
    assert "WARNING: INSECURE deployment (--insecure-zk):" in captured.err
    assert "no zk_digest: every node in ZooKeeper is world-writable" in captured.err


def test_the_template_makes_the_replicas_require_zk_digest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_args("http://127.0.0.1:1", "--dry-run", "--insecure-zk"), environ={}) == 0
    captured = capsys.readouterr()
    # A digest given: --insecure-zk changes nothing and warns about nothing.
    assert json.loads(captured.out)["cmd"].endswith("run-scheduler --require_zk_digest true")
    assert "WARNING" not in captured.err
    argv = _args("http://127.0.0.1:1", "--dry-run", "--env", "require_zk_digest=false")
    assert main(argv, environ={}) == 1
    assert "--env require_zk_digest: set by the template" in capsys.readouterr().err


def test_a_plain_http_artifact_url_is_refused_unless_insecure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _args("http://127.0.0.1:1", "--dry-run")
    argv[argv.index("--artifact-url") + 1] = "http://files.example/ejcloud.tar.gz"
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err
    assert "--artifact-url 'http://files.example/ejcloud.tar.gz' is plain http" in err

    assert main([*argv, "--insecure"], environ={}) == 0
    err = capsys.readouterr().err
    assert "is fetched over plain http: anyone on the path can replace the code" in err


def test_the_artifact_carries_the_hash_lock_and_its_script_installs_only_with_hashes(
    tmp_path: Path,
) -> None:
    path = build_artifact(tmp_path / "a.tar.gz")
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    top = tmp_path / "x" / "ejcloud"
    assert (top / "requirements.lock").read_bytes() == (
        PROJECT_ROOT / "requirements.lock"
    ).read_bytes()
    script = (top / "bin" / "run-scheduler").read_text()
    installs = [line for line in script.splitlines() if "pip" in line and " install" in line]
    assert installs and all("--require-hashes" in line for line in installs), installs
    assert 'install -q --require-hashes --no-deps -r "$here/requirements.lock"' in script
    wheels = sorted((PROJECT_ROOT / "build" / "http-parser" / "wheels").glob("*.whl"))
    if wheels:  # built by ./dev.sh setup; shipped pinned to its hash
        pins = (top / "wheels" / "requirements.txt").read_text()
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        assert f"--hash=sha256:{digest}" in pins


def test_the_start_script_refuses_a_wheel_whose_hash_does_not_match(tmp_path: Path) -> None:
    wheels = sorted((PROJECT_ROOT / "build" / "http-parser" / "wheels").glob("*.whl"))
    if not wheels:
        pytest.fail("no http-parser wheel in build/http-parser/wheels: run ./dev.sh setup")
    path = build_artifact(tmp_path / "a.tar.gz")
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    top = tmp_path / "x" / "ejcloud"
    # Offline: the lock is cut down to the shipped wheel (found locally), so that pip needs no
    # index; then the wheel is swapped for other bytes under the same name.
    (top / "requirements.lock").write_text((top / "wheels" / "requirements.txt").read_text())
    env = {
        **os.environ,
        "hostname": "agent1.example",
        "EJC_VENV": str(tmp_path / "venv"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(top / "wheels"),
    }
    env.pop("EJC_PYTHON", None)
    shipped = top / "wheels" / wheels[0].name
    genuine = shipped.read_bytes()
    shipped.write_bytes(genuine + b"tampered")
    command = [str(top / "bin" / "run-scheduler"), "--help"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run
    assert "hash" in run.stderr.lower() and "do not match" in run.stderr.lower(), run.stderr
    assert not (tmp_path / "venv").exists()  # removed: the next start installs again

    # The genuine wheel installs; the environment is then kept (it holds only the cut-down
    # lock here, so the scheduler itself cannot start in it).
    shipped.write_bytes(genuine)
    subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    venv_python = tmp_path / "venv" / "bin" / "python"
    assert not (tmp_path / "venv" / ".ejcloud-installing").exists()
    imported = subprocess.run([venv_python, "-c", "import http_parser"], timeout=30)
    assert imported.returncode == 0
