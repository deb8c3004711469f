"""The role-by-route matrix of issue 26: every route of the url_map, for each kind of caller, on
a resource of its own app and of another app, answers exactly as docs/routes.md's table says.

The routes are walked from `create_app`'s url_map, not listed here, so a new route joins the
matrix by itself: it must have a line in the table, and the request this module builds for it
(from its path variables and the bodies below) must reach its handler for every allowed caller.

The callers are real principals: users (with scrypt password hashes) and an API token, written as
the access records are stored (the model's codecs into ZooKeeper) and read by the replica's own
follower, plus the settings' admin (`root`, the reference) and guest, and a request without
credentials. Grants are on `own_app`; `other_app` is another team's.

The expectation of a request comes from its route's line in the table (least role and scope) and
the caller's rights on the target app:

- without credentials: 401 (unless the route is public);
- `cluster` scope: allowed only with the role on every app, otherwise 403;
- `app` scope: 404 when the caller sees nothing of the app (the very answer a name that does not
  exist gets; a registration whose body names an invisible app may instead get the 400 of an
  app that is not registered, the same for both), 403 when it sees the app but holds less than
  the role, allowed otherwise;
- `list` and `authenticated`: allowed, and a list never names what the caller cannot see.

"Allowed" means the handler ran: the answer is the one the settings' admin gets for the same
request on the same state (a 2xx, or a 4xx about the request itself), never 401/403. After every
request the ZooKeeper namespace is compared with what it was (only when the ensemble's last zxid
moved, which every reply carries): a refused request must have written nothing; an allowed write
is undone by restoring the nodes, so every request starts from the same state.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from werkzeug.security import generate_password_hash

from deploy.zookeeper import ZooKeeperEnsemble
from executor.records import ExecutionRecord
from scheduler.api import create_app
from scheduler.leader.mesos.operator_actions import RecordedActions, Throttle
from scheduler.leader.statistics import TraceWriter, create_trace_engine, upgrade_to_head
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
    new_grant_id,
)
from scheduler.model.access.roles import ANY_APP, Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.settings import Settings, load_settings
from scheduler.model.task_id import TaskId, TaskType
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage import layout
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from tests.support.bodies import app_body, job_body
from tests.support.waiting import wait_for

ROOT_DIR = Path(__file__).resolve().parents[3]
ROUTES_MD = ROOT_DIR / "docs" / "routes.md"

PASSWORD = "matrix-password-1"
TARGETS = ("own", "other")
GHOST = "ghost"  # the prefix of names that exist nowhere
APP_ROLES = (Role.VIEWER, Role.OPERATOR, Role.EDITOR, Role.APP_ADMIN)
# Each caller and the rights it must have on (own_app, other_app), None: sees nothing there.
CALLERS: dict[str, tuple[Role | None, Role | None]] = {
    **{role.wire: (role, None) for role in APP_ROLES},
    "editor-token": (Role.EDITOR, None),
    "cluster-admin": (Role.CLUSTER_ADMIN, Role.CLUSTER_ADMIN),
    "guest": (Role.VIEWER, Role.VIEWER),
    "nobody": (None, None),
}
# Subtrees whose writes are not the request's doing: the election (the fence), and a token's
# last-used time (written for an accepted token, whatever its request's outcome).
UNWATCHED = ("/ha", layout.ACCESS_TOKENS_USED)
METHODS = re.compile(r"\b(GET|POST|PUT|DELETE|PATCH)\b")
ROLE_WORDS = {r.wire: r for r in Role}
SCOPE_WORDS = ("cluster", "app", "list", "authenticated", "public")


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    role: Role | None
    scope: str


def _route_key(method: str, path: str) -> tuple[str, str]:
    """`(METHOD, /api/a/{}/b)`: path variables, `<x>` or `{x}`, as `{}`; no trailing slash."""
    path = re.sub(r"<[^>]*>|\{[^}]*\}", "{}", path.strip().strip("`"))
    return method.upper(), path.rstrip("/") or "/"


def parse_routes_table(text: str) -> dict[tuple[str, str], Rule]:
    """Every table row naming a method, an `/api` path, a role (or `-`) and a scope."""
    table: dict[tuple[str, str], Rule] = {}
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            continue
        cells = [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]
        joined = " ".join(cells)
        paths = re.findall(r"(/api[^\s`|]*)", joined)
        methods = METHODS.findall(joined)
        words = [c.lower() for c in cells]
        roles = [w for w in words if w in ROLE_WORDS or w in ("-", "none", "—")]
        scopes = [w for w in words if w in SCOPE_WORDS]
        if not paths or not methods or not scopes:
            continue
        role = ROLE_WORDS.get(roles[0]) if roles else None
        for method in methods:
            table[_route_key(method, paths[0])] = Rule(role, scopes[0])
    return table


# -- the world: one API, two apps, the principals --------------------------------------------


@dataclass
class World:
    settings: Settings
    registry: Registry
    client: Any  # the Flask test client
    headers: dict[str, dict[str, str]]  # caller -> its Authorization header ({} for nobody)
    task_of: dict[str, str]  # job -> a running task id of it
    grant_of: dict[str, str]  # target -> a grant on its app (of user victim)
    token_of: dict[str, str]  # target -> a token scoped to its app
    spec: dict[str, Any]  # the API's OpenAPI document (query parameters of each route)
    run_of: dict[str, str] = field(default_factory=dict)  # target -> a workflow run id
    ghost_names: dict[str, str] = field(default_factory=dict)  # other's names -> a ghost's
    baseline: dict[str, bytes] = field(default_factory=dict)
    references: dict[str, Any] = field(default_factory=dict)  # the admin's answers
    zxid: int = 0

    # -- ZooKeeper: what a request wrote, and putting it back -------------------------------

    def snapshot(self) -> dict[str, bytes]:
        """Every node of the namespace but the unwatched ones, with its data: read a level at a
        time, each level's requests pipelined (a few round trips, not one per node)."""
        zk: KazooClient = self.registry.client
        found: dict[str, bytes] = {}
        level = ["/"]
        while level:
            listings = [(p, zk.get_children_async(self.registry.abs(p))) for p in level]
            below: list[str] = []
            for parent, listing in listings:
                try:
                    names = listing.get(timeout=10)
                except NoNodeError:
                    continue  # deleted meanwhile
                for name in names:
                    full = f"{parent.rstrip('/')}/{name}"
                    if not any(full == u or full.startswith(u + "/") for u in UNWATCHED):
                        below.append(full)
            reads = [(p, zk.get_async(self.registry.abs(p))) for p in below]
            for path, read in reads:
                try:
                    found[path] = read.get(timeout=10)[0] or b""
                except NoNodeError:
                    continue
            level = below
        return found

    def last_zxid(self) -> int:
        zk: KazooClient = self.registry.client
        zk.exists_async("/").get(timeout=10)  # every reply carries the ensemble's last zxid
        return int(zk.last_zxid)

    def settle(self) -> dict[str, bytes] | None:
        """The namespace if the ensemble's zxid moved since the baseline, else None."""
        zxid = self.last_zxid()
        if zxid == self.zxid:
            return None
        self.zxid = zxid
        return self.snapshot()

    def restore(self, now: dict[str, bytes]) -> None:
        """Put the namespace back to the baseline (the test's own client, not fenced)."""
        zk: KazooClient = self.registry.client
        for path in sorted(set(now) - set(self.baseline), key=len, reverse=True):
            zk.delete(self.registry.abs(path), recursive=True)
        for path in sorted(set(self.baseline) - set(now), key=len):
            zk.create(self.registry.abs(path), self.baseline[path], makepath=True)
        for path in set(now) & set(self.baseline):
            if now[path] != self.baseline[path]:
                zk.set(self.registry.abs(path), self.baseline[path])
        self.refresh()
        self.zxid = self.last_zxid()

    def ghostly(self, text: str) -> str:
        """`text` about the other team's resources as it would read about a ghost's."""
        for real, ghost in self.ghost_names.items():
            text = text.replace(real, ghost)
        return text

    def refresh(self) -> None:
        """The replica's follower re-reads the access records (as after a write of its own)."""
        self.client.application.extensions["ejc_authenticator"].access.refresh(self.registry)

    # -- requests ----------------------------------------------------------------------------

    def send(self, caller: str, req: Request) -> Any:
        kwargs: dict[str, Any] = {"method": req.method, "headers": dict(self.headers[caller])}
        if req.raw is not None:
            kwargs["data"] = req.raw
            kwargs["content_type"] = "application/json"
        elif req.body is not None:
            kwargs["json"] = req.body
        return self.client.open(req.url, **kwargs)


@dataclass(frozen=True)
class Request:
    method: str
    rule: str
    url: str
    body: Any = None
    raw: str | None = None

    @property
    def key(self) -> str:
        return json.dumps([self.method, self.url, self.body, self.raw], sort_keys=True)


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _put(registry: Registry, path: str, data: bytes) -> None:
    registry.client.create(registry.abs(path), data, makepath=True)


def _seed_access(
    registry: Registry,
) -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, str]]:
    """Users, grants and tokens as the access records store them: (headers of each caller,
    a grant id per target, a token id per target)."""
    now_ms = int(time.time() * 1000)
    hashed = generate_password_hash(PASSWORD)  # werkzeug's scrypt, as the users API stores
    headers: dict[str, dict[str, str]] = {
        "guest": _basic("guest", "guest"),
        "nobody": {},
        "root": _basic("root", "root"),
    }

    def user(name: str, *grants: tuple[Role, str]) -> None:
        _put(registry, layout.access_user_path(name), encode_user(UserRecord(name, hashed, now_ms)))
        for role, app in grants:
            grant = Grant(new_grant_id(), f"user:{name}", role, app)
            _put(registry, layout.access_grant_path(grant.id), encode_grant(grant))

    def token(owner: str, role: Role, app: str) -> tuple[str, str]:
        text, parts = new_token()
        record = TokenRecord(
            parts.id,
            f"ci-{app}",
            f"user:{owner}",
            role,
            app,
            secret_digest(parts.secret),
            now_ms,
            None,
        )
        _put(registry, layout.access_token_path(parts.id), encode_token(record))
        return parts.id, text

    for role in APP_ROLES:
        name = f"own_{role.name.lower()}"
        user(name, (role, "own_app"))
        headers[role.wire] = _basic(name, PASSWORD)
    user("platform", (Role.CLUSTER_ADMIN, ANY_APP))
    headers["cluster-admin"] = _basic("platform", PASSWORD)
    user("other_admin", (Role.APP_ADMIN, "other_app"))
    _, text = token("own_app_admin", Role.EDITOR, "own_app")
    headers["editor-token"] = {"Authorization": f"Bearer {text}"}
    # What the management routes act on: a user, its grant on each app, a token of each app.
    victim_grants = {
        t: Grant(new_grant_id(), "user:victim", Role.VIEWER, f"{t}_app") for t in TARGETS
    }
    user("victim")
    for grant in victim_grants.values():
        _put(registry, layout.access_grant_path(grant.id), encode_grant(grant))
    tokens = {
        "own": token("own_app_admin", Role.VIEWER, "own_app")[0],
        "other": token("other_admin", Role.VIEWER, "other_app")[0],
    }
    return headers, {t: g.id for t, g in victim_grants.items()}, tokens


def _seed_trace(engine: Any, tasks: dict[str, str]) -> None:
    """A status trace and an execution record of each job, so history lists have both."""
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    try:
        at = datetime.now(UTC) - timedelta(minutes=5)
        for n, (job, task) in enumerate(sorted(tasks.items())):
            writer.record_status(
                job_name=job, task_id=task, state="TASK_RUNNING", slave_id="S0", creation_time=at
            )
            writer.record_execution(
                ExecutionRecord(
                    id=f"run-{n}",
                    job_name=job,
                    task_id=task,
                    sharding_item=0,
                    hostname="host-1",
                    ip="10.0.0.1",
                    start_time_ms=int(at.timestamp() * 1000),
                )
            )
        wait_for(lambda: writer.written == 2 * len(tasks), 20, message="trace rows written")
    finally:
        writer.stop(5.0)


def _seed_workflows(client: Any, root: dict[str, str]) -> dict[str, str]:
    """A workflow of each app, with a run (when the API serves workflows): target -> run id."""
    if not any(r.rule == "/api/workflow" for r in client.application.url_map.iter_rules()):
        return {}
    runs: dict[str, str] = {}
    for t in TARGETS:
        body = _workflow_body(f"{t}_flow", f"{t}_app", f"{t}_job")
        made = client.post("/api/workflow", json=body, headers=root)
        assert made.status_code in (200, 201, 204), made.get_data(as_text=True)
        run = client.post(f"/api/workflow/{t}_flow/trigger", headers=root)
        assert run.status_code in (200, 201, 202), run.get_data(as_text=True)
        runs[t] = run.get_json()["runId"]
    return runs


@pytest.fixture(scope="module")
def world(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    zk_client = KazooClient(hosts=zk.hosts, timeout=10)
    zk_client.start(timeout=15)
    engine = create_trace_engine(f"sqlite:///{tmp_path_factory.mktemp('matrix')}/trace.db")
    try:
        upgrade_to_head(engine)
        registry = Registry(zk_client, f"t-matrix-{uuid.uuid4().hex[:12]}")
        registry.ensure("/ha/election")
        node = zk_client.create(
            registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True
        )
        settings = load_settings({}, {}, {"time_zone": "UTC"})
        ctx = LeaderContext(
            settings, registry, Term(1, node, zk_client.client_id[0]), lambda a: None
        )
        flask_app = create_app(ctx, RecordedActions())
        access = flask_app.extensions["ejc_term_access"]
        access.statistics = SimpleNamespace(engine=engine)
        # Reconciliation is throttled to one per 10 s; every caller here asks within that.
        access.reconcile_throttle = Throttle(0.0)
        client = flask_app.test_client(use_cookies=False)  # a login's cookie must not stick
        root = _basic("root", "root")
        tasks: dict[str, str] = {}
        for t in TARGETS:
            assert (
                client.post("/api/app", json=app_body(f"{t}_app"), headers=root).status_code == 204
            )
            job = job_body(f"{t}_job", appName=f"{t}_app")
            assert client.post("/api/job/register", json=job, headers=root).status_code == 204
            tasks[f"{t}_job"] = str(TaskId.new(f"{t}_job", 0, TaskType.READY, "S0"))
            access.running.add(RunningTask(tasks[f"{t}_job"], "S0", state="TASK_RUNNING"))
        _seed_trace(engine, tasks)
        headers, grants, tokens = _seed_access(registry)
        spec = client.get("/api/openapi.json", headers=root).get_json() or {}
        grants[GHOST], tokens[GHOST] = "f" * 16, "f" * 12
        world = World(settings, registry, client, headers, tasks, grants, tokens, spec)
        world.run_of = _seed_workflows(client, root)
        # What an answer about the other team's resources would read about a ghost's; the ids
        # of access records are per target (a record the caller may not manage is hidden too).
        world.ghost_names = {
            "other_app": f"{GHOST}_app",
            "other_job": f"{GHOST}_job",
            "other_flow": f"{GHOST}_flow",
            **{grants[t]: grants[GHOST] for t in TARGETS},
            **{tokens[t]: tokens[GHOST] for t in TARGETS},
        }
        world.refresh()
        world.baseline = world.snapshot()
        world.zxid = world.last_zxid()
        yield world
    finally:
        engine.dispose()
        zk_client.stop()
        zk_client.close()


# -- a request per route and target ------------------------------------------------------------


def _query_names(world: World, rule: str, method: str) -> list[str]:
    path = re.sub(r"<(?:[^:>]*:)?([^>]*)>", r"{\1}", rule)
    path = path.replace("{app_name}", "{appName}").replace("{job_name}", "{jobName}")
    spec = world.spec.get("paths", {}).get(path, {}).get(method.lower(), {})
    return [p["name"] for p in spec.get("parameters", []) if p.get("in") == "query"]


def build_request(
    world: World, method: str, rule: str, arguments: set[str], t: str, *, filters: bool = True
) -> Request:
    """The request of `method rule` about target `t` (own, other or ghost): path variables,
    query filters (unless `filters` is false) and body name that app's resources, so an allowed
    caller reaches the handler."""
    app, job = f"{t}_app", f"{t}_job"
    values: dict[str, str] = {}
    for name in arguments:
        low = name.lower()
        if low == "app_name" or low == "appname" or low == "app":
            values[name] = app
        elif low in ("job_name", "jobname", "job"):
            values[name] = job
        elif low == "taskid":
            values[name] = (
                world.task_of[job] if t in TARGETS else world.ghostly(world.task_of["other_job"])
            )
        elif low == "period":
            values[name] = "lastHour"
        elif "/workflow" in rule and low == "name":
            values[name] = f"{t}_flow"
        elif "/workflow" in rule and low == "run_id":
            run = world.run_of.get(t) or world.ghostly(world.run_of.get("other", "other_flow@1"))
            values[name] = run
        elif "/workflow" in rule and low == "node":
            values[name] = "n1"
        elif "/grants" in rule:
            values[name] = world.grant_of[t]
        elif "/tokens" in rule:
            values[name] = world.token_of[t]
        elif "/users" in rule:
            values[name] = "victim"
        else:
            values[name] = job
    url = rule
    for name, value in values.items():
        url = re.sub(rf"<(?:[^:>]*:)?{re.escape(name)}>", quote(value, safe=""), url)
    query = []
    for name in _query_names(world, rule, method):
        if name in ("jobName", "job"):
            query.append((name, job))
        elif name in ("appName", "app"):
            query.append((name, app))
    if query and filters and method == "GET":
        url += "?" + urlencode(query)
    body: Any = None
    raw: str | None = None
    if method in ("POST", "PUT", "DELETE"):
        body, raw = _body(method, rule, app, job, t)
    return Request(method, rule, url, body, raw)


def _body(method: str, rule: str, app: str, job: str, t: str) -> tuple[Any, str | None]:
    """A valid body for the write routes that take one (None, None: no body)."""
    if rule == "/api/app":
        if method == "POST":
            return app_body(f"{t}_app_new"), None
        return app_body(app, cpuCount=0.25), None
    if rule == "/api/job/register":
        return job_body(f"{t}_job_new", appName=app), None
    if rule == "/api/job/register-many":  # issue 29
        return {"jobs": [job_body(f"{t}_job_many", appName=app)]}, None
    if rule == "/api/job/update":
        return job_body(job, appName=app, cron="0 0 4 * * ?"), None
    if rule in ("/api/job/trigger", "/api/job/deregister"):
        return None, job
    if rule == "/api/workflow":
        name = f"{t}_flow_new" if method == "POST" else f"{t}_flow"
        return _workflow_body(name, app, job), None
    if rule == "/api/access/users" and method == "POST":
        return {"name": f"new_{t}_user", "password": PASSWORD}, None
    if rule == "/api/access/grants" and method == "POST":
        return {"principal": "user:victim", "role": "operator", "app": app}, None
    if rule == "/api/access/tokens" and method == "POST":
        return {"name": f"ci-{t}", "role": "viewer", "app": app}, None
    if rule == "/api/session" and method == "POST":
        return {"user": "root", "password": "root"}, None
    return None, None


def _workflow_body(name: str, app: str, job: str) -> dict[str, Any]:
    """A workflow of one node (issue 27), the app's job."""
    return {"workflowName": name, "appName": app, "nodes": [{"name": "n1", "job": job}]}


# -- the matrix --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    method: str
    rule: str
    arguments: frozenset[str]

    def __str__(self) -> str:
        return f"{self.method} {self.rule}"


def api_operations(world: World) -> list[Operation]:
    app = world.client.application
    found = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api"):
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found.append(Operation(method, rule.rule, frozenset(rule.arguments)))
    return sorted(found, key=lambda op: (op.method != "GET", op.rule, op.method))


def _table() -> dict[tuple[str, str], Rule]:
    assert ROUTES_MD.is_file(), "docs/routes.md (the table of every route's least role) is missing"
    return parse_routes_table(ROUTES_MD.read_text(encoding="utf-8"))


# The access records a route names by id (`/api/access/grants/{id}`, `/api/access/tokens/{id}`)
# are seen only by who may manage them: an app-admin of their app, a cluster-admin, and a token's
# owner (`editor-token` is own_app_admin's token, as the `own` victim token is). To anyone else
# they do not exist: 404, whatever the caller holds on the app (a 403 would confirm the id).
RECORD_ROUTES = re.compile(r"^/api/access/(grants|tokens)/<")
OWNERS = {"own": ("app-admin", "editor-token"), "other": ()}


def expected(rule: Rule, caller: str, t: str, route: str = "") -> int | str:
    """`"allowed"`, or the status the refusal must have."""
    if rule.scope == "public":
        return "allowed"
    if caller == "nobody":
        return 401
    own, other = CALLERS[caller]
    held = own if t == "own" else other
    if RECORD_ROUTES.match(route):
        if held is not None and held >= Role.APP_ADMIN:
            return "allowed"
        return "allowed" if "/tokens/" in route and caller in OWNERS[t] else 404
    if rule.scope == "cluster":
        everywhere = other if own == other else None  # a role on both apps is a role on every app
        return "allowed" if everywhere is not None and everywhere >= (rule.role or 0) else 403
    if rule.scope == "app":
        if held is None:
            return 404
        return "allowed" if held >= (rule.role or 0) else 403
    return "allowed"  # list, authenticated


_NOW = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")


def _text(response: Any) -> str:
    """The answer's text with its times blanked (an aggregate says when it was computed)."""
    return _NOW.sub("<time>", str(response.get_data(as_text=True)))


def _answer(world: World, caller: str, req: Request) -> tuple[Any, dict[str, bytes] | None]:
    response = world.send(caller, req)
    return response, world.settle()


def _undo(world: World, now: dict[str, bytes] | None) -> None:
    if now is not None and now != world.baseline:
        world.restore(now)


def test_the_table_names_every_route_of_the_url_map(world: World) -> None:
    table = _table()
    ops = api_operations(world)
    assert len(ops) >= 40, [str(op) for op in ops]  # the url_map really was read
    missing = [str(op) for op in ops if _route_key(op.method, op.rule) not in table]
    assert not missing, f"routes without a line in docs/routes.md: {missing}"
    for access_route in ("/api/access/users", "/api/access/grants", "/api/access/tokens"):
        assert any(op.rule == access_route for op in ops), f"{access_route} is not served"
    assert any(op.rule == "/api/audit" for op in ops), "/api/audit is not served"


@pytest.mark.parametrize("caller", list(CALLERS))
def test_each_caller_gets_exactly_what_the_table_allows_on_every_route(
    world: World, caller: str
) -> None:
    table = _table()
    blind = CALLERS[caller][1] is None  # sees nothing of other_app
    problems: list[str] = []
    counts = {"allowed": 0, "allowed-2xx": 0, "401": 0, "403": 0, "404": 0, "hidden-list": 0}
    for op in api_operations(world):
        rule = table.get(_route_key(op.method, op.rule))
        if rule is None:
            continue  # test_the_table_names_every_route_of_the_url_map names it
        for t in TARGETS:
            # An unfiltered list shows whether another team's names leak into it.
            filters = not (rule.scope == "list" and t == "own")
            req = build_request(world, op.method, op.rule, set(op.arguments), t, filters=filters)
            want = expected(rule, caller, t, op.rule)
            # The settings' admin's answer on the same state is what reaching the handler gives
            # (the state is the same for every caller: asked once per request).
            reference = world.references.get(req.key)
            if reference is None:
                reference, now = _answer(world, "root", req)
                _undo(world, now)
                world.references[req.key] = reference
            if reference.status_code in (401, 403):
                problems.append(f"{op} ({t}): the settings' admin got {reference.status_code}")
                continue
            if reference.status_code == 404 and rule.scope == "app":
                # Nothing could be judged: the resource the request names does not exist.
                problems.append(
                    f"{op} ({t}): the settings' admin got 404 {_text(reference)[:120]!r}: teach "
                    "build_request (and the world fixture) this route's resource"
                )
                continue
            response, now = _answer(world, caller, req)
            text = _text(response)
            what = f"{op} ({t}) as {caller}: {response.status_code} {text[:160]!r}"
            hidden_list = want == "allowed" and rule.scope == "list" and t == "other" and blind
            if hidden_list:
                counts["hidden-list"] += 1
                _undo(world, now)
            elif want == "allowed":
                counts["allowed"] += 1
                counts["allowed-2xx"] += 200 <= response.status_code < 300
                if response.status_code != reference.status_code:
                    problems.append(f"{what}; allowed, expected {reference.status_code} as root")
                _undo(world, now)
            else:
                counts[str(want)] += 1
                # A body naming an invisible app may be refused as naming no app at all (400
                # "not registered"): allowed only as the very answer a ghost gets (checked below).
                as_ghost = want == 404 and response.status_code == 400
                if response.status_code != want and not as_ghost:
                    problems.append(f"{what}; expected {want}")
                if now is not None and now != world.baseline:
                    problems.append(f"{what}; refused but wrote to ZooKeeper")
                    world.restore(now)
            if want == 404 or hidden_list:
                # Exactly what names that exist nowhere get: the answer confirms nothing.
                ghost = build_request(
                    world, op.method, op.rule, set(op.arguments), GHOST, filters=filters
                )
                answer, now = _answer(world, caller, ghost)
                _undo(world, now)
                if (answer.status_code, _text(answer)) != (
                    response.status_code,
                    world.ghostly(text),
                ):
                    problems.append(f"{what}; a ghost's answer differs: {_text(answer)[:160]!r}")
            if blind and t == "own":
                leaked = [n for n in ("other_app", "other_job", "other_admin") if n in text]
                if leaked:
                    problems.append(f"{what}; names another team's {leaked}")
    print(f"\n{caller}: {counts}")
    assert counts["allowed"] + counts["hidden-list"] > 0
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
