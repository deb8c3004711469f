"""Quotas (max_apps, max_jobs, max_job_bytes, min_fire_interval_seconds) and paged lists
(issue 23), against a real ZooKeeper."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from scheduler.api.paging import BATCH, MAX_LIMIT
from scheduler.model.config.job import JobConfig
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.layout import JOBS
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from tests.integration.api.conftest import ADMIN, APP, GUEST, JOB, Api, make_api


def _job(name: str, **fields: Any) -> dict[str, Any]:
    return {**JOB, "jobName": name, **fields}


def _app(name: str, **fields: Any) -> dict[str, Any]:
    return {**APP, "appName": name, **fields}


# -- quotas --------------------------------------------------------------------------------


def test_max_jobs_refuses_the_job_beyond_it_naming_the_quota_and_writes_nothing(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = make_api(zk_client, zk_namespace, max_jobs="2")
    assert api.call("POST", "/api/app", APP).status_code == 204
    for name in ("j1", "j2"):
        assert api.call("POST", "/api/job/register", _job(name)).status_code == 204
    # A stale disable node of the refused job's name must survive too: nothing is written.
    api.registry.ensure("/state/disable/job/j3")
    before = api.snapshot()
    refused = api.call("POST", "/api/job/register", _job("j3"))
    assert refused.status_code == 409
    assert refused.json["type"] == "QuotaExceeded" and refused.json["quota"] == "max_jobs"
    assert "max_jobs=2" in refused.json["error"]
    assert api.snapshot() == before
    # Room again once one is deleted.
    assert api.call("DELETE", "/api/job/j1/deregister").status_code == 204
    assert api.call("POST", "/api/job/register", _job("j3")).status_code == 204
    assert api.registry.children(JOBS) == ["j2", "j3"]


def test_concurrent_registrations_cannot_pass_max_jobs_together(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = make_api(zk_client, zk_namespace, max_jobs="5")
    assert api.call("POST", "/api/app", APP).status_code == 204
    app = api.client.application
    statuses: list[int] = []
    start = threading.Barrier(12)

    def register(n: int) -> None:
        client = app.test_client()  # one per thread
        start.wait(10)
        answer = client.post("/api/job/register", json=_job(f"race{n:02d}"), headers=ADMIN)
        statuses.append(answer.status_code)

    threads = [threading.Thread(target=register, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [204] * 5 + [409] * 7
    assert len(api.registry.children(JOBS)) == 5


def test_max_apps_refuses_the_app_beyond_it_and_writes_nothing(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = make_api(zk_client, zk_namespace, max_apps="1")
    assert api.call("POST", "/api/app", APP).status_code == 204
    before = api.snapshot()
    refused = api.call("POST", "/api/app", _app("second"))
    assert refused.status_code == 409
    assert refused.json["type"] == "QuotaExceeded" and "max_apps=1" in refused.json["error"]
    assert api.snapshot() == before


def test_max_job_bytes_refuses_big_jobs_and_apps_with_413_at_registration_and_update(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = make_api(zk_client, zk_namespace, max_job_bytes="2048")
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    before = api.snapshot()
    big = "x" * 3000
    for method, path, body in (
        ("POST", "/api/job/register", _job("big", jobParameter=big)),
        ("PUT", "/api/job/update", {"jobName": "demo_job", "jobParameter": big}),
        ("POST", "/api/app", _app("big", bootstrapScript=big)),
        ("PUT", "/api/app", {"appName": "demo_app", "bootstrapScript": big}),
    ):
        refused = api.call(method, path, body)
        assert refused.status_code == 413, (path, refused.json)
        assert refused.json["type"] == "TooLarge" and refused.json["quota"] == "max_job_bytes"
        assert "max_job_bytes=2048" in refused.json["error"]
        assert api.snapshot() == before
    # Just under the bound is fine.
    assert api.call("POST", "/api/job/register", _job("ok", jobParameter="x" * 1000)).status_code
    assert "ok" in api.registry.children(JOBS)


def test_the_default_max_job_bytes_is_64_kib(api: Api) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    near = "p" * 60_000  # a 64 KiB field is allowed alone, but not with the rest of the job
    assert api.call("POST", "/api/job/register", _job("near", jobParameter=near)).status_code == 204
    over = api.call("POST", "/api/job/register", _job("over", jobParameter="p" * 65_536))
    assert over.status_code == 413 and "max_job_bytes=65536" in over.json["error"]


@pytest.mark.parametrize(
    "cron",
    [
        "0/5 * * * * ?",  # every 5 s
        "0,1 0 * * * ?",  # 1 s apart once an hour, 3599 s apart otherwise
        "58,59 59 23 * * ?",  # 1 s apart once a day
        "*/5 * * * * ?",
    ],
)
def test_a_cron_firing_closer_than_min_fire_interval_is_400_naming_the_setting(
    zk_client: KazooClient, zk_namespace: str, cron: str
) -> None:
    api = make_api(zk_client, zk_namespace, min_fire_interval_seconds="10")
    assert api.call("POST", "/api/app", APP).status_code == 204
    before = api.snapshot()
    refused = api.call("POST", "/api/job/register", _job("fast", cron=cron))
    assert refused.status_code == 400
    assert "min_fire_interval_seconds=10" in refused.json["fields"]["cron"]
    assert api.snapshot() == before


def test_min_fire_interval_applies_to_updates_and_spares_daemon_jobs(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = make_api(zk_client, zk_namespace, min_fire_interval_seconds="10")
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", _job("slow", cron="0/10 * * * * ?")).status_code
    stored = api.registry.get(f"{JOBS}/slow")
    refused = api.call("PUT", "/api/job/update", {"jobName": "slow", "cron": "* * * * * ?"})
    assert refused.status_code == 400 and "min_fire_interval_seconds" in refused.json["error"]
    assert api.registry.get(f"{JOBS}/slow") == stored
    daemon = _job("daemon", cron="* * * * * ?", jobExecutionType="DAEMON")
    assert api.call("POST", "/api/job/register", daemon).status_code == 204


# -- paging --------------------------------------------------------------------------------


def _write_jobs(api: Api, zk_client: KazooClient, names: list[str]) -> None:
    """Jobs written straight into ZooKeeper, a transaction per 500 (as many as the API would
    take minutes to register)."""
    api.registry.ensure(JOBS)
    template = JobConfig.from_json(_job("template"), default_time_zone="UTC")
    body = template.to_bytes()
    for start in range(0, len(names), 500):
        txn = zk_client.transaction()
        for name in names[start : start + 500]:
            txn.create(api.registry.abs(f"{JOBS}/{name}"), body.replace(b"template", name.encode()))
        assert all(r is not None and not isinstance(r, Exception) for r in txn.commit())


@pytest.fixture(scope="module")
def many_names() -> list[str]:
    return [f"job{n:05d}" for n in range(10_000)]


@pytest.fixture
def big_api(zk_client: KazooClient, zk_namespace: str, many_names: list[str]) -> Iterator[Api]:
    api = make_api(zk_client, zk_namespace, max_list_items="500")
    assert api.call("POST", "/api/app", APP).status_code == 204
    _write_jobs(api, zk_client, many_names)
    yield api


def _chunks(api: Api, path: str) -> tuple[list[bytes], dict[str, str]]:
    """The body of a GET as the server wrote it out, chunk by chunk, and its headers."""
    answer = api.client.get(path, headers=GUEST, buffered=False)
    assert answer.status_code == 200, answer.get_data()
    chunks = [c if isinstance(c, bytes) else c.encode() for c in answer.response if c]
    return chunks, dict(answer.headers)


def test_paging_walks_10000_jobs_each_exactly_once_in_bounded_pages(
    big_api: Api, many_names: list[str]
) -> None:
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        path = "/api/job/jobs?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        chunks, headers = _chunks(big_api, path)
        page = json.loads(b"".join(chunks))
        assert set(page) == {"items", "nextCursor"}
        assert 0 < len(page["items"]) <= 1000
        # Read and written a batch at a time: never the whole page in one piece.
        assert len(chunks) >= len(page["items"]) // BATCH
        assert max(len(c) for c in chunks) < 3 * BATCH * len(
            big_api.registry.get(f"{JOBS}/job00000") or b""
        )
        assert headers["X-Total-Count"] == "10000"
        seen += [job["jobName"] for job in page["items"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 10
    assert seen == many_names  # every job exactly once, in name order


def test_a_walk_survives_jobs_added_and_deleted_between_pages(big_api: Api) -> None:
    first = big_api.call("GET", "/api/job/jobs?limit=3", headers=GUEST).json
    assert [j["jobName"] for j in first["items"]] == ["job00000", "job00001", "job00002"]
    # The page's last job goes, one before the cursor and one after it come.
    assert big_api.call("DELETE", "/api/job/job00002/deregister").status_code == 204
    assert big_api.call("POST", "/api/job/register", _job("job00001a")).status_code == 204
    assert big_api.call("POST", "/api/job/register", _job("job00003a")).status_code == 204
    second = big_api.call("GET", f"/api/job/jobs?limit=3&cursor={first['nextCursor']}").json
    assert [j["jobName"] for j in second["items"]] == ["job00003", "job00003a", "job00004"]


def test_the_unpaged_list_is_capped_at_max_list_items_with_the_total_in_a_header(
    big_api: Api, many_names: list[str]
) -> None:
    answer = big_api.call("GET", "/api/job/jobs", headers=GUEST)
    assert answer.status_code == 200
    assert isinstance(answer.json, list)
    assert [j["jobName"] for j in answer.json] == many_names[:500]
    assert answer.headers["X-Total-Count"] == "10000"


def test_the_last_page_has_no_next_cursor_and_an_empty_list_pages_too(api: Api) -> None:
    empty = api.call("GET", "/api/job/jobs?limit=10")
    assert empty.json == {"items": [], "nextCursor": None}
    assert api.call("GET", "/api/job/jobs").json == []
    assert api.call("POST", "/api/app", APP).status_code == 204
    for name in ("a", "b"):
        assert api.call("POST", "/api/job/register", _job(name)).status_code == 204
    exact = api.call("GET", "/api/job/jobs?limit=2").json
    assert [j["jobName"] for j in exact["items"]] == ["a", "b"] and exact["nextCursor"] is None


def _cursor(parts: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        (f"limit={MAX_LIMIT + 1}", "limit"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("limit=", "limit"),
        ("limit=" + "9" * 40, "limit"),
        ("limit=%EF%BC%95", "limit"),  # a fullwidth 5
        ("cursor=" + _cursor(["jobs", "a"]), "cursor"),  # a cursor without limit
        ("limit=5&cursor=!!!", "cursor"),
        ("limit=5&cursor=" + "A" * 5000, "cursor"),
        ("limit=5&cursor=" + _cursor(["running", "a"]), "cursor"),  # another list's
        ("limit=5&cursor=" + _cursor(["jobs", 5]), "cursor"),
        ("limit=5&cursor=" + _cursor({"jobs": "a"}), "cursor"),
        ("limit=5&cursor=" + base64.urlsafe_b64encode(b"\xff\xfe").decode(), "cursor"),
    ],
)
def test_a_bad_limit_or_cursor_is_400_naming_it(api: Api, query: str, field: str) -> None:
    for path in ("/api/job/jobs", "/api/app/list", "/api/job/tasks/ready"):
        answer = api.call("GET", f"{path}?{query}")
        assert answer.status_code == 400, (path, query)
        assert field in answer.json["fields"]


def test_apps_page(api: Api) -> None:
    for n in range(5):
        assert api.call("POST", "/api/app", _app(f"app{n}")).status_code == 204
    names: list[str] = []
    cursor = ""
    while True:
        page = api.call("GET", f"/api/app/list?limit=2&cursor={cursor}", headers=GUEST).json
        assert len(page["items"]) <= 2
        names += [a["appName"] for a in page["items"]]
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
    assert names == [f"app{n}" for n in range(5)]
    capped = make_api(api.registry.client, api.registry.abs("/")[1:], max_list_items="3")
    answer = capped.call("GET", "/api/app/list")
    assert len(answer.json) == 3 and answer.headers["X-Total-Count"] == "5"


def _walk(api: Api, path: str, limit: int) -> list[Any]:
    items: list[Any] = []
    cursor = ""
    while True:
        page = api.call("GET", f"{path}?limit={limit}&cursor={cursor}", headers=GUEST).json
        assert len(page["items"]) <= limit
        items += page["items"]
        if page["nextCursor"] is None:
            return items
        cursor = page["nextCursor"]


def test_running_ready_and_failover_tasks_page(api: Api) -> None:
    stores = TermStores.build(api.registry, api.term.fence, "UTC", 1000)
    assert api.call("POST", "/api/app", APP).status_code == 204
    for n in range(3):
        assert api.call("POST", "/api/job/register", _job(f"job{n}")).status_code == 204
        assert api.call("POST", "/api/job/trigger", raw=f"job{n}").status_code == 204
    ready = _walk(api, "/api/job/tasks/ready", 2)
    assert ready == [{"jobName": f"job{n}", "times": "1"} for n in range(3)]
    assert ready == api.call("GET", "/api/job/tasks/ready").json  # the plain array: the same

    ids = [str(TaskId.new(f"job{n % 3}", n, TaskType.READY, "agent")) for n in range(12)]
    for task_id in ids:
        stores.running.add(RunningTask(task_id, "agent"))
    running = _walk(api, "/api/job/tasks/running", 5)
    assert sorted(t["id"] for t in running) == sorted(ids)
    assert len(running) == 12

    for item in range(12):
        assert stores.failover.add(ids[item])
    failover = _walk(api, "/api/job/tasks/failover", 5)
    assert len(failover) == 12
    got = [(f["taskInfo"]["jobName"], f["taskInfo"]["shardingItems"][0]) for f in failover]
    assert got == sorted((f"job{n % 3}", n) for n in range(12))


def test_every_batch_of_a_streamed_list_is_shown_as_the_caller_may_see_it(api: Api) -> None:
    # More jobs than one batch: the later batches are read while the answer streams, and must
    # still know who asked (the admin sees webhook paths, the guest does not).
    assert api.call("POST", "/api/app", APP).status_code == 204
    hook = "https://hooks.example.invalid/secret-token"
    for n in range(BATCH * 2 + 3):
        job = _job(f"hooked{n:02d}", notifyWebhookUrl=hook)
        assert api.call("POST", "/api/job/register", job).status_code == 204
    for limit in ("", "?limit=100"):
        admin = api.call("GET", f"/api/job/jobs{limit}").json
        guest = api.call("GET", f"/api/job/jobs{limit}", headers=GUEST).json
        admin_items = admin if isinstance(admin, list) else admin["items"]
        guest_items = guest if isinstance(guest, list) else guest["items"]
        assert len(admin_items) == len(guest_items) == BATCH * 2 + 3
        assert {j["notifyWebhookUrl"] for j in admin_items} == {hook}
        assert {j["notifyWebhookUrl"] for j in guest_items} == {"https://hooks.example.invalid/..."}
