"""`JobHistogram` and `JobCounter` write the bytes prometheus_client's own `Histogram`,
`Counter` and `generate_latest` write for the same observations, through their own text and
through `collect`; a `MetricsRegistry` writes the other collectors as `generate_latest` does."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.utils import floatToGoString

from scheduler.edge.job_series import JobCounter, JobHistogram, MetricsRegistry, _number
from scheduler.edge.metrics import OTHER_JOBS, SchedulerMetrics, render_metrics

BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
NAME, DOC = "ejc_job_run_duration_seconds", 'How long runs ran.\nA "quoted" \\ line'

_names = st.sampled_from(["a", "job-1", 'q"uote', "back\\slash", "new\nline", "ünï", "_other"])
_amounts = st.one_of(
    st.sampled_from([0.0, *map(float, BUCKETS), 86400.5, 1e9, 1e-9]),
    st.floats(min_value=0, max_value=200_000, allow_nan=False),
)


def _library(observations: list[tuple[str, float]]) -> bytes:
    """The library's text for the same observations, without `_created` series, as the leader
    writes it (a process-wide setting: a test run alone must not depend on another setting it)."""
    disable_created_metrics()
    registry = CollectorRegistry()
    histogram = Histogram(NAME, DOC, ["job_name"], buckets=BUCKETS, registry=registry)
    for name, amount in observations:
        histogram.labels(name).observe(amount)
    return generate_latest(registry)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_names, _amounts), max_size=40))
@example([("a", 0.1), ("a", 0.10000000000000002), ("b", 86400.0), ("b", 86400.00001)])
def test_the_text_is_the_librarys_for_the_same_observations(
    observations: list[tuple[str, float]],
) -> None:
    disable_created_metrics()  # as SchedulerMetrics does
    ours = MetricsRegistry()
    histogram = JobHistogram(NAME, DOC, "job_name", BUCKETS)
    ours.register(histogram)
    for name, amount in observations:
        histogram.observe(name, amount)
    expected = _library(observations)
    assert ours.latest() == expected
    # Read as any collector (the filtered scrape, tests): the same.
    assert generate_latest(ours) == expected


def test_a_removed_series_is_gone_and_others_stay() -> None:
    histogram = JobHistogram(NAME, DOC, "job_name", BUCKETS)
    for name in ("a", "b", "c"):
        histogram.observe(name, 3.0)
    histogram.remove("b")
    histogram.remove("never")
    assert histogram.text() == _library([("a", 3.0), ("c", 3.0)]).decode()
    assert histogram.text(shown=lambda name: name == "c") == _library([("c", 3.0)]).decode()


def test_the_registry_writes_its_other_collectors_as_generate_latest_does() -> None:
    ours = MetricsRegistry()
    launches = Counter("ejc_task_launches", "Launches.", ["type"], registry=ours)
    launches.labels("READY").inc()
    histogram = JobHistogram(NAME, DOC, "job_name", BUCKETS)
    ours.register(histogram)
    histogram.observe("a", 1.5)
    text = ours.latest()
    assert text == generate_latest(ours)
    assert b'ejc_task_launches_total{type="READY"} 1.0' in text
    ours.unregister(histogram)
    assert NAME.encode() not in ours.latest()


def test_counts_are_written_as_the_library_writes_them() -> None:
    for count in (0, 1, 999_999, 1_000_000, 1_234_567, 10**16, 10**17 + 3):
        assert _number(count) == floatToGoString(float(count)), count


def test_a_filtered_scrape_shows_the_same_series_from_either_registry() -> None:
    """`metrics_require_auth`: a caller who sees job a only gets a's series, from the
    replica's registry as from a plain one (where the histogram is read through `collect`)."""

    def scrape(registry: CollectorRegistry) -> list[str]:
        metrics = SchedulerMetrics(registry)
        for job in ("a", "b", OTHER_JOBS):
            metrics.runs.inc(job, "success")
            metrics.fires_skipped.inc(job, "capped", 2)
            metrics.run_duration.observe(job, 2.0)
        text = render_metrics(registry, lambda names: names & {"a"}).decode()
        return sorted(text.splitlines())

    ours, plain = scrape(MetricsRegistry()), scrape(CollectorRegistry())
    assert ours == plain
    text = "\n".join(ours)
    assert f'{NAME}_count{{job_name="a"}} 1.0' in text
    assert 'ejc_job_fires_skipped_total{job_name="a",outcome="capped"} 2.0' in text
    assert 'job_name="b"' not in text
    assert f'job_name="{OTHER_JOBS}"' not in text


_results = st.sampled_from(["success", "failure", 'we"ird'])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(_names, _results, st.floats(min_value=0, max_value=1e9, allow_nan=False)),
        max_size=40,
    ),
    st.lists(_names, max_size=3),
)
def test_the_counters_text_is_the_librarys_for_the_same_counts(
    counts: list[tuple[str, str, float]], removed: list[str]
) -> None:
    disable_created_metrics()
    library = CollectorRegistry()
    counter = Counter("ejc_job_runs", DOC, ["job_name", "result"], registry=library)
    ours = MetricsRegistry()
    mine = JobCounter("ejc_job_runs", DOC, "job_name", "result")
    ours.register(mine)
    for name, result, amount in counts:
        counter.labels(name, result).inc(amount)
        mine.inc(name, result, amount)
    for name in removed:
        for result in ("success", "failure", 'we"ird'):
            try:
                counter.remove(name, result)
            except KeyError:
                pass
        mine.remove(name)
    expected = generate_latest(library)
    assert ours.latest() == expected
    assert generate_latest(ours) == expected
