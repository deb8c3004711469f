"""The `ejcloud` CLI as a real subprocess against real replica processes and a real ZooKeeper.

Requests go to a standby, so every write is redirected to the leader and the CLI must send it
again there with its method, body and credentials.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from tests.support.http import exchange
from tests.support.replicas import ROOT, ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

ADMIN = ("root", "root")


class Cli:
    """Runs `python -m ejcloud_cli` with an environment of its own (no user config file)."""

    def __init__(self, home: Path, **env: str) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
        self.env.update(
            {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "COLUMNS": "200"}
        )
        self.env.update(env)

    def __call__(
        self, *args: str, stdin: str | None = None, timeout_s: float = 30
    ) -> subprocess.CompletedProcess[str]:
        # subprocess.run kills the CLI if it outlives timeout_s or the test is interrupted.
        return subprocess.run(
            [sys.executable, "-m", "ejcloud_cli", *args],
            cwd=ROOT,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self(*args, stdin=stdin)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        assert done.stderr == "" or "warning" in done.stderr, done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok("--json", *args))


def api(replica: ReplicaProcess, path: str, auth: tuple[str, str] = ADMIN) -> tuple[int, Any]:
    """GET `path` on `replica` (a redirect is followed, as urllib does): (status, decoded JSON)."""
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    answer = exchange(
        "GET",
        f"http://{replica.identity}{path}",
        headers={"Authorization": f"Basic {token}"},
        timeout_s=5,
    )
    return answer.status, answer.json()


@pytest.fixture
def replicas(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> Iterator[tuple[ReplicaProcess, ReplicaProcess]]:
    """(leader, standby), the standby already following the leader."""
    started = [
        ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace).start() for _ in range(2)
    ]
    try:
        leader = wait_for(
            lambda: next((r for r in started if r.is_leader()), None), 20, message="a leader"
        )
        standby = next(r for r in started if r is not leader)
        wait_for(
            lambda: (standby.health() or {}).get("leader") == leader.identity,
            10,
            message="the standby to follow the leader",
        )
        yield leader, standby
    finally:
        for r in started:
            r.stop()


@pytest.fixture
def cli_admin(tmp_path: Path, replicas: tuple[ReplicaProcess, ReplicaProcess]) -> Cli:
    _, standby = replicas
    return Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=f"http://{standby.identity}",
        EJCLOUD_USER=ADMIN[0],
        EJCLOUD_PASSWORD=ADMIN[1],
    )


JOB_YAML = """\
# a SIMPLE transient job, in YAML
jobName: hello
appName: demo_app
jobType: SIMPLE
jobClass: demo.jobs:hello
jobExecutionType: TRANSIENT
cron: 0/10 * * * * ?
shardingTotalCount: 2
shardingItemParameters: 0=a,1=b
cpuCount: 0.1
memoryMB: 32
"""


def test_cli_registers_lists_changes_and_deletes_through_a_standby(
    cli_admin: Cli, replicas: tuple[ReplicaProcess, ReplicaProcess], tmp_path: Path
) -> None:
    leader, _ = replicas
    cli = cli_admin

    # An app from flags, a job from a YAML file, another from JSON on stdin.
    out = cli.ok(
        "app", "add", "demo_app", "--url", "file:///tmp/demo_app.tar.gz",
        "--bootstrap", "bin/start.sh", "--cpu", "0.1", "--memory", "64",
    )  # fmt: skip
    assert out.strip() == "app demo_app registered"
    status, app = api(leader, "/api/app/demo_app")
    assert status == 200 and app["appURL"] == "file:///tmp/demo_app.tar.gz"
    assert app["cpuCount"] == 0.1 and app["memoryMB"] == 64

    spec = tmp_path / "hello.yaml"
    spec.write_text(JOB_YAML)
    assert cli.ok("job", "add", "-f", str(spec)).strip() == "job hello registered"
    script = {
        "jobName": "script_job",
        "appName": "demo_app",
        "jobType": "SCRIPT",
        "scriptCommandLine": "scripts/hello.sh",
        "jobExecutionType": "TRANSIENT",
        "cron": "0 0 * * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 32,
    }
    done = cli("--json", "job", "add", "-f", "-", stdin=json.dumps(script))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ok": True, "action": "registered", "jobName": "script_job"}

    # Lists and shows: tables for people, the server's JSON for scripts.
    apps = cli.json("app", "list")
    assert [a["appName"] for a in apps] == ["demo_app"]
    table = cli.ok("app", "list").splitlines()
    assert table[0].split() == ["NAME", "CPUS", "MEM_MB", "BOOTSTRAP", "URL"]
    assert table[1].split() == [
        "demo_app",
        "0.1",
        "64",
        "bin/start.sh",
        "file:///tmp/demo_app.tar.gz",
    ]
    shown = cli.ok("app", "show", "demo_app")
    assert "bootstrapScript:" in shown and "disabled:" in shown
    assert shown.splitlines()[-1].split() == ["disabled:", "no"]

    rows = {line.split()[0]: line.split() for line in cli.ok("job", "list").splitlines()[1:]}
    assert sorted(rows) == ["hello", "script_job"]
    assert rows["hello"][:4] == ["hello", "demo_app", "SIMPLE", "TRANSIENT"]
    assert [j["jobName"] for j in cli.json("job", "list", "--app", "demo_app")] == [
        "hello",
        "script_job",
    ]
    assert cli.json("job", "list", "--app", "other") == []
    job = cli.json("job", "show", "hello")
    assert job == api(leader, "/api/job/jobs/hello")[1]
    assert job["cron"] == "0/10 * * * * ?" and job["shardingItemParameters"] == "0=a,1=b"

    # `job show --json` round-trips into `job update -f`; flags update single fields.
    job["cron"] = "0/30 * * * * ?"
    shown_file = tmp_path / "hello.json"
    shown_file.write_text(json.dumps(job))
    assert cli.ok("job", "update", "-f", str(shown_file)).strip() == "job hello updated"
    assert api(leader, "/api/job/jobs/hello")[1]["cron"] == "0/30 * * * * ?"
    cli.ok("job", "update", "hello", "--shards", "3", "--shard-params", "0=a,1=b,2=c")
    updated = api(leader, "/api/job/jobs/hello")[1]
    assert updated["shardingTotalCount"] == 3 and updated["cron"] == "0/30 * * * * ?"
    cli.ok("app", "update", "demo_app", "--memory", "128")
    assert api(leader, "/api/app/demo_app")[1]["memoryMB"] == 128

    # Trigger queues a run; disable drops it and refuses triggers; enable allows them again.
    assert cli.ok("job", "trigger", "hello").strip() == "job hello triggered"
    assert {"jobName": "hello", "times": "1"} in api(leader, "/api/job/tasks/ready")[1]
    assert cli.ok("job", "disable", "hello").strip() == "job hello disabled"
    assert api(leader, "/api/job/hello/disable")[1] is True
    assert cli.ok("job", "show", "hello").splitlines()[-1].split() == ["disabled:", "yes"]
    refused = cli("job", "trigger", "hello")
    assert refused.returncode == 6, refused.stderr
    assert "ejcloud: error: job 'hello' is disabled; enable it first" in refused.stderr
    cli.ok("job", "enable", "hello")
    assert api(leader, "/api/job/hello/disable")[1] is False
    cli.ok("app", "disable", "demo_app")
    assert api(leader, "/api/app/demo_app/disable")[1] is True
    cli.ok("app", "enable", "demo_app")
    assert api(leader, "/api/app/demo_app/disable")[1] is False

    # Delete: a job, then the app with the rest; afterwards both are unknown (exit code 4).
    assert cli.ok("job", "delete", "hello").strip() == "job hello deleted"
    gone = cli("job", "show", "hello")
    assert gone.returncode == 4 and "hello" in gone.stderr and "Traceback" not in gone.stderr
    assert api(leader, "/api/job/jobs/hello")[0] == 404
    cli.ok("app", "delete", "demo_app")
    assert api(leader, "/api/app/list")[1] == []
    assert api(leader, "/api/job/jobs")[1] == []
    assert cli("app", "show", "demo_app").returncode == 4


def test_bad_input_prints_the_servers_fields_and_writes_nothing(
    cli_admin: Cli, replicas: tuple[ReplicaProcess, ReplicaProcess]
) -> None:
    leader, _ = replicas
    cli_admin.ok("app", "add", "a1", "--url", "file:///tmp/a1.tar.gz", "--bootstrap", "bin/x")
    done = cli_admin(
        "job", "add", "bad", "--app", "a1", "--type", "SIMPLE", "--class", "m:f",
        "--execution", "TRANSIENT", "--cron", "not a cron", "--shards", "0",
        "--cpu", "0.1", "--memory", "32",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("ejcloud: error: invalid job")
    # Each bad field named once, with its problem: the server's message lists them all (the
    # field lines under it, which repeated them, are left out).
    fields = json.loads(cli_admin("--json", *done.args[3:]).stderr)["fields"]
    assert {"cron", "shardingTotalCount"} <= set(fields)
    for name, problem in fields.items():
        assert done.stderr.count(f"{name}: {problem}") == 1, (name, done.stderr)
    assert api(leader, "/api/job/jobs")[1] == []

    as_json = cli_admin("--json", "app", "add", "a1", "--url", "file:///x", "--bootstrap", "b")
    assert as_json.returncode == 6
    error = json.loads(as_json.stderr)
    assert error["status"] == 409 and error["exitCode"] == 6 and "already exists" in error["error"]

    # Caught here, before anything is sent.
    usage = cli_admin("job", "add", "x", "--set", "novalue")
    assert usage.returncode == 2 and "--set takes FIELD=VALUE" in usage.stderr


def test_kill_with_nothing_running_says_so_and_exits_7(cli_admin: Cli) -> None:
    cli_admin.ok("app", "add", "k1", "--url", "file:///tmp/k1.tar.gz", "--bootstrap", "bin/x")
    cli_admin.ok(
        "job", "add", "idle", "--app", "k1", "--type", "SIMPLE", "--class", "m:f",
        "--execution", "TRANSIENT", "--cron", "0 0 0 1 1 ?", "--shards", "1",
        "--cpu", "0.1", "--memory", "32",
    )  # fmt: skip
    done = cli_admin("job", "kill", "idle")
    assert done.returncode == 7, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.strip() == "ejcloud: error: job idle has no running task; nothing was killed"
    as_json = cli_admin("--json", "job", "kill", "idle")
    assert as_json.returncode == 7
    assert json.loads(as_json.stderr) == {
        "error": "job idle has no running task; nothing was killed",
        "type": "NothingRunning",
        "exitCode": 7,
    }
    # An unknown job is still a 404 (exit 4), not "nothing running".
    assert cli_admin("job", "kill", "nosuch").returncode == 4


def test_wrong_password_and_read_only_user_get_the_servers_message(
    replicas: tuple[ReplicaProcess, ReplicaProcess], tmp_path: Path
) -> None:
    leader, standby = replicas
    status, expected = api(leader, "/api/app/list", auth=("root", "wrong"))
    assert status == 401

    cli = Cli(tmp_path / "home", EJCLOUD_SERVER=standby.identity)
    done = cli("--user", "root", "--password", "wrong", "app", "list")
    assert done.returncode == 5
    assert done.stderr.splitlines()[0] == f"ejcloud: error: {expected['error']}"
    assert done.stdout == "" and "Traceback" not in done.stderr

    anonymous = cli("app", "list")
    assert anonymous.returncode == 5 and "hint: give credentials" in anonymous.stderr

    guest = cli("--user", "guest", "--password", "guest", "app", "add", "g", "--url", "file:///g")
    # The server's 403 names the role needed and the one held (api/access_control.py).
    assert guest.returncode == 5
    assert "cluster-admin on every app is needed; user:guest holds viewer" in guest.stderr
    assert api(leader, "/api/app/list")[1] == []
    assert cli("--user", "guest", "--password", "guest", "app", "list").returncode == 0


def test_unreachable_server_gives_exit_code_3(tmp_path: Path) -> None:
    port = free_port()
    cli = Cli(tmp_path / "home", EJCLOUD_USER="root", EJCLOUD_PASSWORD="root")
    done = cli("--server", f"127.0.0.1:{port}", "--timeout", "3", "job", "list")
    assert done.returncode == 3
    assert done.stderr.strip() == (
        f"ejcloud: error: cannot connect: http://127.0.0.1:{port}: connection refused"
    )
    status = cli("--server", f"127.0.0.1:{port}", "status")
    assert status.returncode == 3 and "connection refused" in status.stdout


def test_status_shows_roles_leader_and_states_and_finds_a_leader_not_given(
    replicas: tuple[ReplicaProcess, ReplicaProcess], tmp_path: Path
) -> None:
    leader, standby = replicas
    cli = Cli(tmp_path / "home")
    both = f"{leader.identity},http://{standby.identity}"
    lines = cli.ok("--server", both, "status").splitlines()
    assert lines[0].split() == ["SERVER", "ROLE", "LEADER", "ZOOKEEPER", "MESOS", "TERM", "HEALTH"]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows[f"http://{leader.identity}"][1:4] == ["leader", leader.identity, "CONNECTED"]
    assert rows[f"http://{standby.identity}"][1:4] == ["standby", leader.identity, "CONNECTED"]
    assert lines[-1] == f"leader: {leader.identity}"
    # Without credentials /health hides the term; with them the leader's TERM is filled.
    assert rows[f"http://{leader.identity}"][5] == "-"
    term = api(leader, "/health")[1]["term"]["number"]
    authed = Cli(tmp_path / "home", EJCLOUD_USER=ADMIN[0], EJCLOUD_PASSWORD=ADMIN[1])
    lines = authed.ok("--server", both, "status").splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows[f"http://{leader.identity}"][5] == str(term), lines
    assert rows[f"http://{standby.identity}"][5] == "-"
    # ... and of a leader found through a standby that vouches for it.
    found_authed = json.loads(authed.ok("--json", "--server", standby.identity, "status"))
    assert found_authed["servers"][1]["discovered"] is True
    assert found_authed["servers"][1]["health"]["term"]["number"] == term

    # Only the standby given: the leader it names is read too.
    found = cli("--json", "--server", standby.identity, "status")
    assert found.returncode == 0, found.stdout
    body = json.loads(found.stdout)
    assert body["ok"] is True and body["leader"] == leader.identity
    assert [(s["server"], s["discovered"]) for s in body["servers"]] == [
        (f"http://{standby.identity}", False),
        (f"http://{leader.identity}", True),
    ]
    assert body["servers"][1]["health"]["role"] == "leader"


def test_cli_tries_each_server_and_follows_a_new_leader(
    replicas: tuple[ReplicaProcess, ReplicaProcess], tmp_path: Path
) -> None:
    leader, standby = replicas
    dead = f"127.0.0.1:{free_port()}"
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=f"{dead},{standby.identity},{leader.identity}",
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )
    cli.ok("app", "add", "a1", "--url", "file:///tmp/a1.tar.gz", "--bootstrap", "bin/start.sh")
    leader.signal(signal.SIGTERM)
    assert leader.wait(15) == 0
    wait_for(standby.is_leader, 15, message="the standby to take over")
    # The old leader's port refuses; the former standby now answers itself.
    assert [a["appName"] for a in cli.json("app", "list")] == ["a1"]


def test_a_request_during_a_leader_crash_waits_for_the_new_leader(
    replicas: tuple[ReplicaProcess, ReplicaProcess], tmp_path: Path
) -> None:
    leader, standby = replicas
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=standby.identity,
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )
    leader.signal(signal.SIGKILL)
    leader.wait(10)
    # The standby still names the dead leader until its session expires (4 s here): the CLI
    # keeps trying the round until the standby leads, within its timeout.
    assert (standby.health() or {}).get("role") == "standby"
    done = cli("--timeout", "25", "app", "add", "a1", "--url", "file:///a1", "--bootstrap", "b")
    assert done.returncode == 0, done.stderr
    assert standby.is_leader()
    assert [a["appName"] for a in api(standby, "/api/app/list")[1]] == ["a1"]
