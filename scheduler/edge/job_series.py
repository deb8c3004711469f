"""Per-job series written as Prometheus text by themselves (issue 29).

A job that has run has about 21 series: 19 of the run-duration histogram (16 buckets, `+Inf`,
count and sum), its runs by result, its skipped fires by outcome. Through `prometheus_client`'s
`Histogram`/`Counter` and `generate_latest`, every scrape builds a sample object for each series
and formats its labels anew: about 8 µs a series, so 0.8-1.5 s of the leader for 5,000 jobs,
while the leader's other threads get the interpreter less often (a cron fire that met a scrape
was launched up to 0.74 s late). `JobHistogram` and `JobCounter` keep each job's values in
plain lists and its label text made once, and write the text themselves, the same bytes
`generate_latest` writes for the same observations (unit tests compare the two).

They are `prometheus_client` collectors as well: `collect()` gives the same family to whoever
reads the registry (the filtered scrape of `metrics_require_auth`, tests). `MetricsRegistry`,
the replica's registry, writes its other collectors with `generate_latest` and these with
`text()`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["JobCounter", "JobHistogram", "MetricsRegistry", "TextFamily"]


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


def _header(name: str, documentation: str, kind: str) -> str:
    """A family's HELP and TYPE lines, as `generate_latest` writes them."""
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class TextFamily(Collector):
    """A family of per-job series that writes its own text."""

    @abstractmethod
    def text(self, shown: Callable[[str], bool] | None = None) -> str:
        """The family in Prometheus' text format (with `shown`, only the jobs it accepts), as
        `generate_latest` writes it."""

    @abstractmethod
    def label_values(self) -> set[str]:
        """The jobs with series."""


@dataclass
class _Series:
    labels: str  # `job_name="..."`, escaped
    counts: list[int]  # per bucket, `+Inf` last (not cumulative)
    total: float = 0.0


class JobHistogram(TextFamily):
    """A histogram with one label (the job): `observe`, `remove`, `text`; any thread."""

    def __init__(self, name: str, documentation: str, label: str, buckets: Sequence[float]):
        self.name = name
        self.documentation = documentation
        self._label = label
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._le = (*(_go(b) for b in self._bounds), "+Inf")
        self._header = _header(name, documentation, "histogram")
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


@dataclass
class _Count:
    labels: str  # `job_name="...",result="..."`, escaped, in the names' order
    value: float = 0.0


class JobCounter(TextFamily):
    """A counter labelled with the job and one more label (`result`, `outcome`): `inc`,
    `remove`, `text`; any thread. `name` without `_total`, as `Counter` takes it."""

    def __init__(self, name: str, documentation: str, label: str, other: str) -> None:
        self.name = name
        self.documentation = documentation
        self._label, self._other = label, other
        self._header = _header(f"{name}_total", documentation, "counter")
        self._lock = threading.Lock()
        # (job, other value) -> its series, in the order first counted; the keys of each job,
        # to remove them.
        self._values: dict[tuple[str, str], _Count] = {}
        self._keys: dict[str, list[tuple[str, str]]] = {}

    def inc(self, value: str, other: str, amount: float = 1.0) -> None:
        """Add `amount` to the series of job `value` and `other`."""
        key = (value, other)
        with self._lock:
            entry = self._values.get(key)
            if entry is None:
                pairs = sorted(((self._label, value), (self._other, other)))
                labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs)
                entry = self._values[key] = _Count(labels)
                self._keys.setdefault(value, []).append(key)
            entry.value += amount

    def remove(self, value: str) -> None:
        """Drop every series of job `value` (none: nothing)."""
        with self._lock:
            for key in self._keys.pop(value, ()):
                del self._values[key]

    def _rows(self, shown: Callable[[str], bool] | None) -> list[tuple[str, str, str, float]]:
        with self._lock:
            return [
                (value, other, entry.labels, entry.value)
                for (value, other), entry in self._values.items()
                if shown is None or shown(value)
            ]

    def text(self, shown: Callable[[str], bool] | None = None) -> str:
        name = f"{self.name}_total"
        rows = self._rows(shown)
        return self._header + "".join(
            f"{name}{{{labels}}} {_go(amount)}\n" for _v, _o, labels, amount in rows
        )

    def label_values(self) -> set[str]:
        with self._lock:
            return set(self._keys)

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self._names())]

    def _names(self) -> list[str]:
        return [self._label, self._other]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self._names())
        for value, other, _labels, amount in self._rows(None):
            family.add_metric([value, other], amount)
        return [family]


class MetricsRegistry(CollectorRegistry):
    """A registry whose `JobHistogram`s and `JobCounter`s write their own text (`latest`);
    `collect` gives every family, theirs included, as any registry's does."""

    def __init__(self) -> None:
        super().__init__()
        self._own_lock = threading.Lock()
        self._own_text: list[TextFamily] = []

    def register(self, collector: Collector) -> None:
        if isinstance(collector, TextFamily):
            with self._own_lock:
                self._own_text.append(collector)
            return
        super().register(collector)

    def unregister(self, collector: Collector) -> None:
        if isinstance(collector, TextFamily):
            with self._own_lock:
                self._own_text.remove(collector)
            return
        super().unregister(collector)

    def own_text(self) -> list[TextFamily]:
        """The `JobHistogram`s and `JobCounter`s registered."""
        with self._own_lock:
            return list(self._own_text)

    def others(self) -> Collector:
        """The collectors registered but those writing their own text, as one."""
        return _Others(self)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        for family in self.own_text():
            yield from family.collect()

    def latest(self) -> bytes:
        """Every family in Prometheus' text format, as `generate_latest(self)` would write it
        (those writing their own text last)."""
        rest = generate_latest(self.others())
        return rest + "".join(family.text() for family in self.own_text()).encode()


class _Others(Collector):
    """A `MetricsRegistry`'s collectors but those writing their own text."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return CollectorRegistry.collect(self._registry)
