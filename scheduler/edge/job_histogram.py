"""A histogram per job, written as Prometheus text by itself (issue 29).

The run-duration histogram has 19 series a job (16 buckets, `+Inf`, count and sum). Through
`prometheus_client`'s `Histogram` and `generate_latest`, every scrape builds a sample object for
each series and formats its labels anew: about 8 µs a series, so 0.8-1.5 s of the leader for
5,000 jobs, while the leader's other threads get the interpreter less often (a cron fire that
met a scrape was launched up to 0.74 s late). `JobHistogram` keeps each job's counts in a list
and its label text made once, and writes the text itself, the same bytes `generate_latest`
writes for the same observations (a unit test compares the two).

It is a `prometheus_client` collector as well: `collect()` gives the same family to whoever
reads the registry (the filtered scrape of `metrics_require_auth`, tests). `MetricsRegistry`,
the replica's registry, writes its other collectors with `generate_latest` and these with
`text()`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["JobHistogram", "MetricsRegistry"]


def _go(value: float) -> str:
    """A value as the text format writes it (prometheus_client's own function, untyped)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def _escaped(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: int) -> str:
    """A count as `_go(float(value))` writes it, faster for the usual ones (up to
    six digits Python's `repr` of the float is the integer and `.0`)."""
    return f"{value}.0" if 0 <= value < 1_000_000 else _go(float(value))


@dataclass
class _Series:
    labels: str  # `job_name="..."`, escaped
    counts: list[int]  # per bucket, `+Inf` last (not cumulative)
    total: float = 0.0


class JobHistogram(Collector):
    """A histogram with one label (the job): `observe`, `remove`, `text`; any thread."""

    def __init__(self, name: str, documentation: str, label: str, buckets: Sequence[float]):
        self.name = name
        self.documentation = documentation
        self._label = label
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._le = (*(_go(b) for b in self._bounds), "+Inf")
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self._header = f"# HELP {name} {doc}\n# TYPE {name} histogram\n"
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}

    def observe(self, value: str, amount: float) -> None:
        """One observation of `amount` for label value `value`."""
        index = bisect.bisect_left(self._bounds, amount)  # the first bound >= amount
        with self._lock:
            series = self._series.get(value)
            if series is None:
                labels = f'{self._label}="{_escaped(value)}"'
                series = self._series[value] = _Series(labels, [0] * len(self._le))
            series.counts[index] += 1
            series.total += amount

    def remove(self, value: str) -> None:
        """Drop the series of `value` (none: nothing)."""
        with self._lock:
            self._series.pop(value, None)

    def _rows(
        self, shown: Callable[[str], bool] | None
    ) -> Iterator[tuple[str, str, list[int], float]]:
        """(label value, label text, cumulative counts, sum) of each series `shown` accepts,
        as they were at one moment."""
        with self._lock:
            taken = [
                (value, series.labels, series.counts[:], series.total)
                for value, series in self._series.items()
                if shown is None or shown(value)
            ]
        for value, labels, counts, total in taken:
            yield value, labels, list(itertools.accumulate(counts)), total

    def text(self, shown: Callable[[str], bool] | None = None) -> str:
        """The family in Prometheus' text format (with `shown`, only the label values it
        accepts), as `generate_latest` writes it."""
        out = [self._header]
        name = self.name
        for _value, labels, cumulative, total in self._rows(shown):
            bucket = f"{name}_bucket{{{labels},le="
            out.extend(
                f'{bucket}"{le}"}} {_number(count)}\n'
                for le, count in zip(self._le, cumulative, strict=True)
            )
            out.append(f"{name}_count{{{labels}}} {_number(cumulative[-1])}\n")
            out.append(f"{name}_sum{{{labels}}} {_go(total)}\n")
        return "".join(out)

    def label_values(self) -> set[str]:
        """The label values (jobs) with series."""
        with self._lock:
            return set(self._series)

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=[self._label])]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self._label])
        for value, _labels, cumulative, total in self._rows(None):
            buckets = [(le, float(count)) for le, count in zip(self._le, cumulative, strict=True)]
            family.add_metric([value], buckets, total)
        return [family]


class MetricsRegistry(CollectorRegistry):
    """A registry whose `JobHistogram`s write their own text (`latest`); `collect` gives
    every family, theirs included, as any registry's does."""

    def __init__(self) -> None:
        super().__init__()
        self._own_lock = threading.Lock()
        self._own_text: list[JobHistogram] = []

    def register(self, collector: Collector) -> None:
        if isinstance(collector, JobHistogram):
            with self._own_lock:
                self._own_text.append(collector)
            return
        super().register(collector)

    def unregister(self, collector: Collector) -> None:
        if isinstance(collector, JobHistogram):
            with self._own_lock:
                self._own_text.remove(collector)
            return
        super().unregister(collector)

    def histograms(self) -> list[JobHistogram]:
        """The `JobHistogram`s registered."""
        with self._own_lock:
            return list(self._own_text)

    def others(self) -> Collector:
        """The collectors registered but the `JobHistogram`s, as one."""
        return _Others(self)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        for histogram in self.histograms():
            yield from histogram.collect()

    def latest(self) -> bytes:
        """Every family in Prometheus' text format, as `generate_latest(self)` would write it
        (the `JobHistogram`s last)."""
        rest = generate_latest(self.others())
        return rest + "".join(h.text() for h in self.histograms()).encode()


class _Others(Collector):
    """A `MetricsRegistry`'s collectors but its `JobHistogram`s."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return CollectorRegistry.collect(self._registry)
