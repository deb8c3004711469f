"""The audit log in the statistics component (issue 26), on SQLite and PostgreSQL: records made
before the schema is migrated wait and are written, records past `audit_retention_days` are
deleted by the component's periodic work, and a retried batch that had committed is not written
twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit import AuditEntry, AuditQuery
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.statistics.models import AuditRecord
from scheduler.model.settings import load_settings
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence
from tests.support.waiting import wait_for


def _entry(request_id: str, age: timedelta = timedelta(0)) -> AuditEntry:
    return AuditEntry.make(
        time=datetime.now(UTC).replace(tzinfo=None) - age,
        actor="user:root",
        source="127.0.0.1",
        action="job.trigger",
        resource="job/demo_job",
        outcome="ok",
        status=204,
        request_id=request_id,
        term=1,
        job="demo_job",
    )


def _ids(engine: Engine) -> set[str]:
    with Session(engine) as session:
        return set(session.scalars(select(AuditRecord.request_id)))


def test_the_component_writes_what_waited_for_the_schema_and_prunes_old_records(
    trace_url: str, registry: Registry, fence: Fence
) -> None:
    # A record of long ago, left by an earlier term.
    engine = create_trace_engine(trace_url)
    try:
        upgrade_to_head(engine)
        with engine.begin() as connection:
            connection.execute(insert(AuditRecord), [_entry("old", timedelta(days=31)).row()])
        settings = load_settings(
            {}, {}, {"event_trace_rdb_url": trace_url, "audit_retention_days": "30"}
        )
        statistics = Statistics(settings, registry, fence)
        statistics.start()
        try:
            # Made before the component has migrated the schema: held, then written.
            statistics.audit.record(_entry("early"))
            wait_for(lambda: _ids(engine) == {"early"}, 20, message="old pruned, early written")
            entries, following = statistics.audit.query(AuditQuery(limit=10, job="demo_job"))
            assert [e.request_id for e in entries] == ["early"] and following is None
            assert statistics.info()["audit"]["written"] == 1
        finally:
            statistics.stop()
    finally:
        engine.dispose()


def test_a_retried_batch_that_had_committed_is_not_written_twice(trace_url: str) -> None:
    engine = create_trace_engine(trace_url)
    try:
        upgrade_to_head(engine)
        entry = _entry("once")
        # As if the first try committed and its answer was lost.
        AuditLog._commit(engine, [entry], skip_present=False)
        AuditLog._commit(engine, [entry, _entry("twice")], skip_present=True)
        with Session(engine) as session:
            count = session.scalar(select(func.count()).select_from(AuditRecord))
        assert count == 2
        assert _ids(engine) == {"once", "twice"}
    finally:
        engine.dispose()
