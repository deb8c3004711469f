"""Fires a calendar excluded (issue 28) are counted by job, outcome `excluded`, one by one, and
the series goes with its job."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from scheduler.edge.metrics import SchedulerMetrics
from scheduler.model.job_events import JobEvent, JobEventKind
from tests.unit.edge.test_metrics import _samples


def test_excluded_fires_are_counted_by_job_and_dropped_with_it() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    reason = "fire excluded: calendar maint: weekly SAT 02:00-04:00"
    metrics.on_job_event(JobEvent(JobEventKind.FIRE_EXCLUDED, "a", 1.0, reason, fires=4))
    metrics.on_job_event(JobEvent(JobEventKind.FIRE_EXCLUDED, "a", 9.0, reason))
    metrics.on_job_event(JobEvent(JobEventKind.FIRE_SKIPPED, "a", 9.0, "misfire off"))
    key = ("ejc_job_fires_skipped_total", (("job_name", "a"), ("outcome", "excluded")))
    skipped = ("ejc_job_fires_skipped_total", (("job_name", "a"), ("outcome", "skipped")))
    samples = _samples(registry)
    assert samples[key] == 5 and samples[skipped] == 1
    metrics.forget_job("a")
    assert key not in _samples(registry)
