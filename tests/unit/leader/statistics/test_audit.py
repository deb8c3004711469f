"""The audit log's pure parts (issue 26): secrets masked, the page query built, action names,
and its figures on /metrics."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CollectorRegistry
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from scheduler.api.audit import action_of
from scheduler.edge.metrics import ReplicaCollector, ReplicaFigures, TermFigures
from scheduler.leader.statistics.audit import (
    MASK,
    AuditEntry,
    AuditQuery,
    mask_secrets,
    select_page,
)


def test_fields_named_like_secrets_are_masked_at_any_depth() -> None:
    masked = mask_secrets(
        {
            "name": "ci",
            "password": "hunter2",
            "tokenSecret": "abc",
            "nested": [{"secretDigest": "d", "apiKey": "k", "Authorization": "Basic x"}],
            "token": None,
            "role": "editor",
        }
    )
    assert masked == {
        "name": "ci",
        "password": MASK,
        "tokenSecret": MASK,
        "nested": [{"secretDigest": MASK, "apiKey": MASK, "Authorization": MASK}],
        "token": None,  # nothing to hide
        "role": "editor",
    }


def test_urls_lose_their_userinfo_and_query_but_keep_host_and_path() -> None:
    assert mask_secrets("https://u:p@hooks.example.com:8443/a/b?key=s#f") == (
        "https://***@hooks.example.com:8443/a/b?***"
    )
    assert mask_secrets("https://hooks.example.com/a?token=s") == "https://hooks.example.com/a?***"
    assert mask_secrets("http://example.com/app.tar.gz") == "http://example.com/app.tar.gz"
    assert mask_secrets("a plain @ text? yes") == "a plain @ text? yes"
    assert mask_secrets("http://[::1/?x") == MASK  # too broken to split: may hold anything


def test_a_webhooks_url_keeps_only_its_scheme_and_host() -> None:
    masked = mask_secrets(
        {
            "notifyWebhookUrl": "https://hooks.slack.example/services/T0/B0/XXXXSECRET",
            "callbackUrl": "http://u:p@10.0.0.1:8080/cb?k=v",
            "webhook": "not a url",
            "hookless": "",
        }
    )
    assert masked == {
        "notifyWebhookUrl": "https://hooks.slack.example/***",
        "callbackUrl": "http://***@10.0.0.1:8080/***",
        "webhook": MASK,
        "hookless": "",
    }


def test_masking_leaves_numbers_and_booleans_and_cuts_absurd_nesting() -> None:
    deep: object = "leaf"
    for _ in range(40):
        deep = [deep]
    assert mask_secrets({"n": 3, "b": True, "deep": deep})["n"] == 3
    assert MASK in str(mask_secrets(deep))


def _sql(query: AuditQuery, dialect: Dialect | None = None) -> str:
    statement = select_page(query)
    compiled = statement.compile(
        dialect=dialect or sqlite.dialect(), compile_kwargs={"literal_binds": True}
    )
    return " ".join(str(compiled).split())


def test_the_page_query_filters_orders_newest_first_and_asks_one_more() -> None:
    at = datetime(2026, 11, 26, 19, 0, 0)
    text = _sql(
        AuditQuery(
            limit=50,
            actor="user:alice",
            outcome="denied",
            since=at,
            after=(at, "f" * 32),
            apps=frozenset({"b", "a"}),
        )
    )
    assert "\"AUDIT_LOG\".actor = 'user:alice'" in text
    assert "\"AUDIT_LOG\".outcome = 'denied'" in text
    assert "\"AUDIT_LOG\".time >= '2026-11-26 19:00:00.000000'" in text
    assert "\"AUDIT_LOG\".app IN ('a', 'b')" in text
    assert f"\"AUDIT_LOG\".id < '{'f' * 32}'" in text
    assert text.endswith('ORDER BY "AUDIT_LOG".time DESC, "AUDIT_LOG".id DESC LIMIT 51 OFFSET 0')


def test_the_page_query_without_filters_reads_every_record_and_any_app_means_not_null() -> None:
    assert "WHERE" not in _sql(AuditQuery(limit=10))
    text = _sql(AuditQuery(limit=10, apps=frozenset(), any_app=True), postgresql.dialect())
    assert '"AUDIT_LOG".app IS NOT NULL' in text


def test_an_entry_cuts_its_fields_to_their_columns_and_keeps_changes_as_json() -> None:
    entry = AuditEntry.make(
        actor="user:" + "x" * 1000,
        source="10.0.0.1",
        action="job.update",
        resource="job/j",
        outcome="ok",
        status=204,
        request_id="r",
        term=3,
        changes={"before": {"cron": "a"}, "after": {"cron": "b"}},
    )
    assert len(entry.actor) == 320
    assert entry.row()["changes"] == '{"after":{"cron":"b"},"before":{"cron":"a"}}'
    shown = entry.to_json()
    assert shown["requestId"] == "r" and shown["term"] == 3 and shown["time"].endswith("Z")


def test_each_change_has_a_stable_action_name() -> None:
    assert action_of("jobs.register_job", "POST", "/api/job/register") == "job.register"
    assert action_of("jobs.enable_job", "DELETE", "/api/job/j/disable") == "job.enable"
    assert action_of("apps.delete_app", "DELETE", "/api/app/a") == "app.delete"
    assert action_of("operate.reconcile_implicit", "POST", "/api/operate/reconcile/implicit") == (
        "reconcile"
    )
    assert action_of("access.anything", "POST", "/api/access/grants") == "grant.create"
    assert action_of("access.anything", "DELETE", "/api/access/tokens/0123") == "token.revoke"
    assert action_of("access.anything", "DELETE", "/api/access/users/bob") == "user.delete"
    assert action_of("x", "POST", "/api/session") == "session.login"
    assert action_of("runs.list_runs", "GET", "/api/job/j/runs") == "runs.list_runs"
    assert action_of(None, "POST", "/api/nowhere") == "unknown"


def test_audit_figures_reach_metrics() -> None:
    registry = CollectorRegistry(auto_describe=True)
    figures = ReplicaFigures(
        acting=True,
        terms=1,
        term_failures=0,
        leader_changes=0,
        zk_clients=1,
        zk_state="CONNECTED",
        started_at=0.0,
        term=TermFigures(audit_write_failures=3, audit_dropped=1, audit_backlog=2),
    )
    registry.register(ReplicaCollector(lambda: figures))
    assert registry.get_sample_value("ejc_audit_write_failures_total") == 3
    assert registry.get_sample_value("ejc_audit_dropped_total") == 1
    assert registry.get_sample_value("ejc_audit_backlog") == 2
