"""Every route of the leader's API as data, and a watch that proves refused requests wrote nothing.

`operations(api)` reads the routes from the Flask app's url_map (so a new route is covered by the
tests that walk them without editing them) and what each takes (query parameters, body) from the
OpenAPI document the API serves, which a test in test_api.py keeps complete.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, urlencode

from kazoo.client import KazooClient

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit_log import AuditLog
from tests.integration.api.conftest import ADMIN, APP, JOB, Api, make_api

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Path values that name what the live API holds, so a request that is not about a path reaches
# its handler's deepest checks.
PATH_DEFAULTS = {"app_name": "demo_app", "job_name": "demo_job", "period": "lastHour"}
_WIRE_NAMES = {"app_name": "appName", "job_name": "jobName"}


@dataclass(frozen=True)
class Operation:
    method: str
    rule: str
    path_params: tuple[str, ...]
    query: tuple[str, ...]
    body: str | None
    """"App", "Job", "name" (a raw job name) or None."""
    fields: tuple[str, ...]

    @property
    def writes(self) -> bool:
        return self.method not in READ_METHODS

    def slots(self) -> list[tuple[str, str]]:
        """Where a request can carry client text: ("path"|"query"|"field"|"name", name)."""
        found = [("path", p) for p in self.path_params]
        found += [("query", q) for q in self.query]
        found += [("field", f) for f in self.fields]
        if self.body == "name":
            found.append(("name", "jobName"))
        return found or [("query", "q")]

    def template(self) -> Any:
        return {"App": APP, "Job": JOB, "name": "demo_job"}.get(self.body or "")

    def __str__(self) -> str:
        return f"{self.method} {self.rule}"


def openapi_path(rule: str) -> str:
    path = rule.replace("<", "{").replace(">", "}")
    for flask_name, wire_name in _WIRE_NAMES.items():
        path = path.replace("{" + flask_name + "}", "{" + wire_name + "}")
    return path


def operations(api: Api) -> list[Operation]:
    """Every method of every `/api` route; read-only ones first, deletions last."""
    doc = api.call("GET", "/api/openapi.json").json
    schemas = doc["components"]["schemas"]
    found = []
    for rule in api.client.application.url_map.iter_rules():
        if not rule.rule.startswith("/api"):
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            spec = doc["paths"][openapi_path(rule.rule)][method.lower()]
            query = tuple(p["name"] for p in spec.get("parameters", []) if p["in"] == "query")
            body: str | None = None
            fields: tuple[str, ...] = ()
            if "requestBody" in spec:
                schema = spec["requestBody"]["content"]["application/json"]["schema"]
                ref = schema.get("$ref", "")
                body = ref.rsplit("/", 1)[-1] if ref else "name"
                if ref:
                    fields = tuple(schemas[body]["properties"])
            found.append(
                Operation(method, rule.rule, tuple(sorted(rule.arguments)), query, body, fields)
            )
    return sorted(found, key=lambda op: (op.writes, op.method == "DELETE", op.rule, op.method))


def url(op: Operation, path: dict[str, str] | None = None, query: Any = ()) -> str:
    """The URL of `op` with `path` values (defaults elsewhere), UTF-8 percent-encoded; lone
    surrogates are encoded as the invalid UTF-8 a hostile client would send."""
    values = {name: PATH_DEFAULTS.get(name, "x") for name in op.path_params}
    values.update(path or {})
    text = op.rule
    for name, value in values.items():
        encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
        text = text.replace(f"<{name}>", encoded)
    if query:
        pairs = [(k, v.encode("utf-8", "surrogatepass")) for k, v in query]
        text += "?" + urlencode(pairs)
    return text


def send(
    api: Api,
    op: Operation,
    *,
    path: dict[str, str] | None = None,
    query: Any = (),
    body: bytes | None = None,
    content_type: str | None = "application/json",
    headers: dict[str, str] | None = None,
) -> Any:
    hdrs = {**ADMIN, **(headers or {})}
    kwargs: dict[str, Any] = {"method": op.method, "headers": hdrs}
    if body is not None:
        kwargs["data"] = body
    if content_type is not None and (body is not None or op.writes):
        kwargs["content_type"] = content_type
    return api.client.open(url(op, path, query), **kwargs)


def json_bytes(value: Any) -> bytes:
    """JSON as a client sends it; a lone surrogate goes as a `\\ud800` escape (ASCII output)."""
    return json.dumps(value).encode("ascii")


def assert_answer(response: Any, what: object) -> None:
    """Never a 5xx; a 4xx is a JSON object naming the problem in `error`."""
    assert response.status_code < 500, (what, response.status_code, response.data[:300])
    if response.status_code >= 400:
        body = response.get_json(silent=True)
        assert isinstance(body, dict), (what, response.data[:300])
        assert isinstance(body.get("error"), str) and body["error"], (what, body)


class WriteWatch:
    """Proves that refused requests write nothing and that the ZooKeeper client lives.

    Every reply of ZooKeeper carries its last transaction id, so one read after a request shows
    whether anything at all was written; only then is the namespace compared with the last
    snapshot (another session's transaction elsewhere changes the id but not this namespace).
    The read also fails, with a clear message, if kazoo's connection thread has died.
    """

    def __init__(self, api: Api) -> None:
        self._api = api
        self._client: KazooClient = api.registry.client
        self._baseline = api.snapshot()
        self._zxid = self._last_zxid()

    def _last_zxid(self) -> int:
        assert self._client.connected, "the ZooKeeper client lost its connection"
        try:
            self._client.exists_async("/").get(timeout=10)
        except Exception as exc:
            raise AssertionError(f"ZooKeeper no longer answers this client: {exc!r}") from exc
        return int(self._client.last_zxid)

    def check(self, response: Any, what: object) -> None:
        zxid = self._last_zxid()
        if zxid != self._zxid:
            now = self._api.snapshot()
            if response.status_code >= 400:
                assert now == self._baseline, f"a refused request wrote to ZooKeeper: {what}"
            self._baseline = now
        self._zxid = zxid


def ensure_demo(api: Api) -> None:
    """The demo app and job exist and are enabled, whatever earlier requests did."""
    if api.call("GET", "/api/app/demo_app").status_code == 404:
        assert api.call("POST", "/api/app", APP).status_code == 204
    api.call("DELETE", "/api/app/demo_app/disable")
    if api.call("GET", "/api/job/jobs/demo_job").status_code == 404:
        assert api.call("POST", "/api/job/register", JOB).status_code == 204
    api.call("DELETE", "/api/job/demo_job/disable")


@contextmanager
def live_api(hosts: str, trace_dir: Path) -> Iterator[Api]:
    """The API on its own client and namespace, with the demo app and job registered and the
    event trace on SQLite (so history queries really run); everything closed at exit."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    engine = create_trace_engine(f"sqlite:///{trace_dir}/trace.db")
    audit: AuditLog | None = None
    try:
        upgrade_to_head(engine)
        api = make_api(client, f"t-live-{uuid.uuid4().hex[:12]}")
        access = api.client.application.extensions["ejc_term_access"]
        access.statistics = SimpleNamespace(engine=engine)
        # The audit log on the same database, as a term's statistics give it (GET /api/audit).
        audit = api.client.application.extensions["ejc_audit"]
        audit.open(engine)
        audit.start()
        ensure_demo(api)
        yield api
    finally:
        if audit is not None:
            audit.stop(2.0)
        engine.dispose()
        client.stop()
        client.close()
