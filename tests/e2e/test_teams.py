"""Two teams on one cluster (issue 26), with real processes: two scheduler replicas, the local
Mesos stand-in with its agents and real executors, the `ejcloud` CLI, an SQLite event trace.

Team A (`team_a_app`) and team B (`team_b_app`) each have a job that has run. Alice is an editor
of team A (HTTP Basic); team A's CI uses a token its app-admin Ann made (the CLI with
`EJCLOUD_TOKEN`). Neither may see, trigger, read the logs of, or learn the names of team B's
jobs: every answer about them is the one a job that exists nowhere gets, and no list names them.
A revoked token stops working on the standby and the leader within a second; after a leader
change the grants and tokens hold; every change the module made is in the audit log.

One cluster for the module (one xdist group, see tests/support/parallel.py); each test stands
on the fixture's set-up alone, so that tests sent to another worker (each its own cluster) still
hold. The leader change is last: the audit check that follows it in the same test covers every
change made on its cluster, in both terms.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system
from tests.support.http import exchange
from tests.support.replicas import ROOT, ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

NEVER = "0 0 0 1 1 ? 2099"
PASSWORD = "team-password-1"
ROOT_AUTH = "Basic " + base64.b64encode(b"root:root").decode()
GHOST_JOB = "ghost_job"
GHOST_APP = "ghost_app"
B_NAMES = ("team_b_app", "b_job")


def basic(user: str, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bearer(token: str) -> str:
    return f"Bearer {token}"


def call(
    replica: ReplicaProcess,
    method: str,
    path: str,
    auth: str | None,
    body: Any = None,
    raw: str | None = None,
) -> tuple[int, Any, str]:
    """One request to `replica` itself (no redirect followed): (status, JSON or None, text)."""
    data = raw.encode() if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {}
    if auth is not None:
        headers["Authorization"] = auth
    if data is not None:
        headers["Content-Type"] = "application/json"
    # A 307 is the answer (a standby's), not something to follow with the credentials.
    answer = exchange(
        method,
        f"http://{replica.identity}{path}",
        data=data,
        headers=headers,
        follow_redirects=False,
    )
    status, text = answer.status, answer.body.decode()
    try:
        decoded = json.loads(text) if text else None
    except ValueError:
        decoded = None
    return status, decoded, text


@dataclass
class Teams:
    system: System
    alice: str = basic("alice")  # editor of team A
    ann: str = basic("ann")  # app-admin of team A
    ci_token: str = ""  # editor of team A, made by Ann
    b_task: str = ""  # a task of team B's job that ran
    # Every change the module made: (actor, resource) that its audit record must name.
    changes: list[tuple[str, str]] = field(default_factory=list)

    def leader(self) -> ReplicaProcess:
        found = wait_for(self.system.leader, 20, message="a leader")
        assert found is not None
        return found

    def standby(self) -> ReplicaProcess:
        leader = self.leader()
        return next(r for r in self.system.replicas if r is not leader and r.alive())

    def api(
        self, method: str, path: str, auth: str, body: Any = None, raw: str | None = None
    ) -> tuple[int, Any, str]:
        return call(self.leader(), method, path, auth, body, raw)

    def change(
        self, actor: str, resource: str, method: str, path: str, auth: str, **kw: Any
    ) -> Any:
        """A change that must succeed (2xx) and be audited as `actor` on `resource`."""
        status, body, text = self.api(method, path, auth, **kw)
        assert 200 <= status < 300, (method, path, status, text)
        self.changes.append((actor, resource))
        return body

    def cli(self, token: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`ejcloud` with `EJCLOUD_TOKEN` against both replicas (it finds the leader)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
        home = self.system.tmp / "home"
        env.update(
            {
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "COLUMNS": "250",
                "EJCLOUD_SERVER": ",".join(r.identity for r in self.system.replicas if r.alive()),
                "EJCLOUD_TOKEN": token,
            }
        )
        return subprocess.run(
            [sys.executable, "-m", "ejcloud_cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def _ended_run(teams: Teams, job: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        status, body, _ = teams.api("GET", f"/api/job/{job}/runs?limit=10", ROOT_AUTH)
        assert status == 200, body
        done = [r for r in body["runs"] if r["endTime"] is not None]
        return done[0] if done else None

    found: dict[str, Any] = wait_for(ended, 60, message=f"an ended run of {job}")
    return found


@pytest.fixture(scope="module")
def teams(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    tmp = tmp_path_factory.mktemp("teams")
    namespace = f"t-teams-{os.getpid()}-{int(time.time())}"
    with running_system(
        zk.hosts,
        namespace,
        tmp,
        event_trace_rdb_url=f"sqlite:///{tmp}/trace.db",
        audit_file=str(tmp / "audit.jsonl"),  # each record also as a JSON line
        # /metrics needs credentials and shows a caller the series of its apps' jobs only.
        metrics_require_auth="true",
    ) as system:
        teams = Teams(system)
        root = "user:root"
        for team in ("a", "b"):
            app = f"team_{team}_app"
            system.make_app(app)
            teams.changes.append((root, f"app/{app}"))
            system.script_job(f"{team}_job", NEVER, shards=1, app=app)
            teams.changes.append((root, f"job/{team}_job"))
        for name in ("alice", "ann", "bob"):
            teams.change(
                root,
                f"user/{name}",
                "POST",
                "/api/access/users",
                ROOT_AUTH,
                body={"name": name, "password": PASSWORD},
            )
        for principal, role, app in (
            ("user:alice", "editor", "team_a_app"),
            ("user:ann", "app-admin", "team_a_app"),
            ("user:bob", "editor", "team_b_app"),
        ):
            grant = teams.api(
                "POST",
                "/api/access/grants",
                ROOT_AUTH,
                body={"principal": principal, "role": role, "app": app},
            )
            assert grant[0] == 201, grant
            teams.changes.append((root, f"grant/{grant[1]['id']}"))
        token = teams.change(
            "user:ann",
            "token",
            "POST",
            "/api/access/tokens",
            teams.ann,
            body={"name": "team-a-ci", "role": "editor", "app": "team_a_app"},
        )
        assert token["token"].startswith("ejc_") and token["role"] == "editor", token
        teams.ci_token = token["token"]
        # Team B's job runs once (by Bob), so it has a run, a log and trace rows to hide.
        teams.change("user:bob", "job/b_job", "POST", "/api/job/trigger", basic("bob"), raw="b_job")
        teams.b_task = _ended_run(teams, "b_job")["taskId"]
        yield teams


def _ghostly(text: str) -> str:
    """`text` about team B's app and job as it would read about ones that exist nowhere."""
    return text.replace("team_b_app", GHOST_APP).replace("b_job", GHOST_JOB)


def _hidden_like_a_ghost(teams: Teams, auth: str, method: str, path: str, **kw: Any) -> None:
    """Team B's resource answers exactly as the same request about a job that exists nowhere."""
    status, _, text = teams.api(method, path, auth, **kw)
    ghost_kw = {k: _ghostly(v) if isinstance(v, str) else v for k, v in kw.items()}
    ghost = teams.api(method, _ghostly(path), auth, **ghost_kw)
    assert status == 404, (method, path, status, text)
    assert (ghost[0], ghost[2]) == (status, _ghostly(text)), (path, text, ghost)


def _names_no_b(text: str, what: str) -> None:
    leaked = [name for name in B_NAMES if name in text]
    assert not leaked, f"{what} names team B's {leaked}: {text[:300]}"


def test_an_editor_of_team_a_cannot_see_trigger_or_read_team_bs_jobs_through_the_api(
    teams: Teams,
) -> None:
    alice = teams.alice
    # Alice does her own work: her team's job is hers to trigger, and it runs.
    teams.change("user:alice", "job/a_job", "POST", "/api/job/trigger", alice, raw="a_job")
    a_task = _ended_run(teams, "a_job")["taskId"]
    status, log, text = teams.api("GET", f"/api/job/a_job/runs/{quote(a_task, safe='')}/log", alice)
    assert status == 200 and "data" in log, text
    # Team B's job: not there, whatever she asks.
    b_task = quote(teams.b_task, safe="")
    _hidden_like_a_ghost(teams, alice, "GET", "/api/job/jobs/b_job")
    _hidden_like_a_ghost(teams, alice, "POST", "/api/job/trigger", raw="b_job")
    _hidden_like_a_ghost(teams, alice, "POST", "/api/job/b_job/disable")
    _hidden_like_a_ghost(teams, alice, "GET", "/api/job/b_job/runs")
    _hidden_like_a_ghost(teams, alice, "GET", "/api/job/b_job/next-fire-times")
    _hidden_like_a_ghost(teams, alice, "GET", f"/api/job/b_job/runs/{b_task}/log")
    _hidden_like_a_ghost(teams, alice, "GET", "/api/app/team_b_app")
    _hidden_like_a_ghost(teams, alice, "GET", "/api/operate/sandbox?appName=team_b_app")
    # Nor does any list she may read name team B's app or job.
    for path in (
        "/api/app/list",
        "/api/job/jobs",
        "/api/job/tasks/running",
        "/api/job/tasks/ready",
        "/api/job/tasks/failover",
        "/api/job/events/executions",
        "/api/job/events/statusTraces",
        "/api/access/grants",
        "/api/access/tokens",
        "/api/audit",
        "/api/session",
    ):
        status, _, text = teams.api("GET", path, alice)
        assert status in (200, 403), (path, status, text)
        _names_no_b(text, f"GET {path} as alice")
    status, jobs, _ = teams.api("GET", "/api/job/jobs", alice)
    assert [j["jobName"] for j in jobs] == ["a_job"], jobs
    # /metrics (metrics_require_auth): the leader's per-job series name team B's job for the
    # admin, never for her; the standby's neither.
    status, _, text = call(teams.leader(), "GET", "/metrics", ROOT_AUTH)
    assert status == 200 and 'job_name="b_job"' in text, text[:300]
    for replica in (teams.leader(), teams.standby()):
        status, _, text = call(replica, "GET", "/metrics", alice)
        assert status == 200, text
        assert 'job_name="a_job"' in text or replica is not teams.leader(), text[:300]
        _names_no_b(text, f"/metrics of {replica.identity} as alice")
        assert call(replica, "GET", "/metrics", None)[0] == 401


def test_team_as_ci_token_in_the_cli_works_on_its_own_app_and_learns_nothing_of_team_b(
    teams: Teams,
) -> None:
    listed = teams.cli(teams.ci_token, "--json", "job", "list")
    assert listed.returncode == 0, listed.stderr
    assert [j["jobName"] for j in json.loads(listed.stdout)] == ["a_job"], listed.stdout
    apps = teams.cli(teams.ci_token, "app", "list")
    assert apps.returncode == 0 and "team_a_app" in apps.stdout, apps
    _names_no_b(apps.stdout + apps.stderr, "ejcloud app list")
    trigger = teams.cli(teams.ci_token, "job", "trigger", "a_job")
    assert trigger.returncode == 0, trigger.stderr
    token_id = teams.ci_token.split("_")[1]
    teams.changes.append((f"token:{token_id}", "job/a_job"))
    for args in (
        ("job", "show", "b_job"),
        ("job", "trigger", "b_job"),
        ("job", "disable", "b_job"),
        ("runs", "b_job"),
        ("logs", teams.b_task),
    ):
        done = teams.cli(teams.ci_token, *args)
        ghost_args = [a.replace("b_job", GHOST_JOB) for a in args]
        ghost = teams.cli(teams.ci_token, *ghost_args)
        assert done.returncode == 4, (args, done.returncode, done.stdout, done.stderr)
        assert (ghost.returncode, ghost.stdout, ghost.stderr) == (
            done.returncode,
            done.stdout.replace("b_job", GHOST_JOB),
            done.stderr.replace("b_job", GHOST_JOB),
        ), (args, done, ghost)


def _refused_since(
    start: float, replicas: list[ReplicaProcess], path: str, auth: str
) -> list[float]:
    """Seconds from `start` until each replica answered 401 to `auth` on `path` (each polled in
    turn, every 10 ms, for at most 10 s)."""
    refused: dict[str, float] = {}

    def all_refuse() -> bool:
        for replica in replicas:
            if replica.identity not in refused and call(replica, "GET", path, auth)[0] == 401:
                refused[replica.identity] = time.monotonic() - start
        return len(refused) == len(replicas)

    wait_for(all_refuse, 10, interval_s=0.01, message=f"every replica refusing {path}")
    return [refused[r.identity] for r in replicas]


def test_a_token_revoked_on_the_leader_stops_working_on_the_standby_and_the_leader_within_a_second(
    teams: Teams,
) -> None:
    made = teams.change(
        "user:ann",
        "token",
        "POST",
        "/api/access/tokens",
        teams.ann,
        body={"name": "short-lived", "role": "viewer", "app": "team_a_app"},
    )
    token = bearer(made["token"])
    leader, standby = teams.leader(), teams.standby()
    path = "/api/job/jobs/a_job"
    # A standby checks a token itself: a valid one is sent on to the leader (307), a revoked
    # one refused there (401).
    wait_for(lambda: call(standby, "GET", path, token)[0] == 307, 5, message="standby knows it")
    assert call(leader, "GET", path, token)[0] == 200
    status, _, text = call(leader, "DELETE", f"/api/access/tokens/{made['id']}", teams.ann)
    revoked_at = time.monotonic()  # the leader's 204: revoked in ZooKeeper
    assert status == 204, text
    teams.changes.append(("user:ann", f"token/{made['id']}"))
    on_leader, on_standby = _refused_since(revoked_at, [leader, standby], path, token)
    print(f"\nrevoked token refused after {on_leader:.3f} s (leader), {on_standby:.3f} s (standby)")
    assert on_leader <= 1.0 and on_standby <= 1.0, (on_leader, on_standby)


def _audit_records(teams: Teams) -> list[dict[str, Any]]:
    """Every record of `GET /api/audit`, following `nextCursor` (newest first)."""
    records: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        path = "/api/audit?limit=500" + (f"&cursor={quote(cursor)}" if cursor else "")
        status, page, text = teams.api("GET", path, ROOT_AUTH)
        assert status == 200, text
        records += page["items"]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return records


def test_after_a_leader_change_access_holds_and_every_change_has_its_audit_record(
    teams: Teams,
) -> None:
    """Last (it stops the leader). One test, since what it checks spans the change: grants and
    tokens made, used and revoked in the first term hold in the second; the audit log holds
    every change of the module, from both terms, and no secret; nor do the logs."""
    revoked = teams.change(
        "user:ann",
        "token",
        "POST",
        "/api/access/tokens",
        teams.ann,
        body={"name": "revoked-before", "role": "viewer", "app": "team_a_app"},
    )
    teams.change(
        "user:ann",
        f"token/{revoked['id']}",
        "DELETE",
        f"/api/access/tokens/{revoked['id']}",
        teams.ann,
    )
    _hidden_like_a_ghost(teams, teams.alice, "GET", "/api/job/jobs/b_job")  # a denied record
    old = teams.leader()
    old.stop()
    new = wait_for(
        lambda: next((r for r in teams.system.replicas if r.alive() and r.is_leader()), None),
        30,
        message="a new leader",
    )
    assert new is not old
    wait_for(lambda: (new.health() or {}).get("mesos") == "connected", 30, message="mesos")
    # The grants and tokens of the first term hold in the second.
    teams.change("user:alice", "job/a_job", "POST", "/api/job/trigger", teams.alice, raw="a_job")
    _hidden_like_a_ghost(teams, teams.alice, "POST", "/api/job/trigger", raw="b_job")
    ci = bearer(teams.ci_token)
    ci_actor = f"token:{teams.ci_token.split('_')[1]}"
    teams.change(ci_actor, "job/a_job", "POST", "/api/job/a_job/disable", ci)
    teams.change(ci_actor, "job/a_job", "DELETE", "/api/job/a_job/disable", ci)
    assert teams.api("GET", "/api/job/jobs/a_job", bearer(revoked["token"]))[0] == 401
    status, _, text = teams.api("POST", "/api/access/users", teams.alice, body={"name": "x"})
    assert status == 403, text
    # Every change has its record, from both terms; refusals too; no secret anywhere.
    records = _audit_records(teams)
    fields = {"time", "actor", "source", "action", "resource", "outcome", "status", "requestId"}
    for record in records:
        assert set(record) >= fields | {"term"}, record
        assert "ejc_" not in json.dumps(record), f"a token's text in the audit log: {record}"
        assert PASSWORD not in json.dumps(record), f"a password in the audit log: {record}"
    done = {(r["actor"], r["resource"]) for r in records if r["outcome"] == "ok"}
    missing = [
        change
        for change in teams.changes
        if not any(a == change[0] and res.startswith(change[1]) for a, res in done)
    ]
    assert not missing, f"changes without an audit record: {missing}; records: {sorted(done)}"
    denied = [r for r in records if r["actor"] == "user:alice" and r["outcome"] == "denied"]
    assert any("b_job" in r["resource"] and r["status"] == 404 for r in denied), denied
    assert len({r["term"] for r in records}) >= 2, {r["term"] for r in records}
    # The audit file has the records as JSON lines; neither it nor a log holds a secret.
    audit_file = teams.system.tmp / "audit.jsonl"
    actors = {json.loads(line)["actor"] for line in audit_file.read_text().splitlines()}
    assert {"user:root", "user:alice", "user:ann", "user:bob", ci_actor} <= actors, actors
    secret = re.compile(r"ejc_[0-9a-f]{12}_[0-9a-f]{48}")
    for path in [audit_file, *(r.log_path for r in teams.system.replicas)]:
        text = path.read_text(errors="replace")
        assert not secret.findall(text), f"a token's text in {path}"
        assert PASSWORD not in text, f"a password in {path}"
