"""Mesos resources as values: scalars (cpus, mem, disk, gpus) and ranges (ports).

Only unreserved resources exist in the stand-in, so roles, reservations and disk info in the
JSON a scheduler sends are ignored; offers mark everything `"role": "*"` plus the
framework's allocation role, as a Mesos master does for non-RESERVATION_REFINEMENT frameworks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Range = tuple[int, int]

# Mesos keeps scalars as fixed point with three decimals (src/common/values.cpp); rounding the
# same way keeps repeated add/subtract from drifting.
_SCALAR_DIGITS = 3
# An agent's leftover is only offered when it holds at least this much cpu or memory
# (MIN_CPUS / MIN_MEM in Mesos's master/constants.hpp).
_MIN_CPUS = 0.01
_MIN_MEM_MB = 32.0
_SPEC_ITEM = re.compile(r"^\s*([A-Za-z_][\w.-]*)(?:\([^)]*\))?\s*:\s*(.+?)\s*$")


class ResourceError(ValueError):
    """A resource list or spec string that cannot be understood; the message names the item."""


def _merge(ranges: Iterable[Range]) -> tuple[Range, ...]:
    merged: list[list[int]] = []
    for begin, end in sorted(ranges):
        if merged and begin <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return tuple((b, e) for b, e in merged)


def _subtract(have: tuple[Range, ...], remove: tuple[Range, ...]) -> tuple[Range, ...]:
    result: list[Range] = []
    for begin, end in have:
        pieces = [(begin, end)]
        for rb, re_ in remove:
            next_pieces: list[Range] = []
            for pb, pe in pieces:
                if re_ < pb or rb > pe:
                    next_pieces.append((pb, pe))
                    continue
                if rb > pb:
                    next_pieces.append((pb, rb - 1))
                if re_ < pe:
                    next_pieces.append((re_ + 1, pe))
            pieces = next_pieces
        result.extend(pieces)
    return _merge(result)


def _covers(have: tuple[Range, ...], need: tuple[Range, ...]) -> bool:
    return all(any(hb <= nb and ne <= he for hb, he in have) for nb, ne in need)


def format_ranges(ranges: Iterable[Range]) -> str:
    """`[31000-31005, 32000-32000]`, the way Mesos's /state renders a ranges resource."""
    return "[" + ", ".join(f"{b}-{e}" for b, e in ranges) + "]"


@dataclass(frozen=True)
class Resources:
    """An immutable bag of scalar and range resources; arithmetic returns new values."""

    scalars: Mapping[str, float] = field(default_factory=dict)
    ranges: Mapping[str, tuple[Range, ...]] = field(default_factory=dict)

    @staticmethod
    def make(
        scalars: Mapping[str, float] | None = None,
        ranges: Mapping[str, Iterable[Range]] | None = None,
    ) -> Resources:
        """Normalise: round scalars, merge ranges, and drop empty entries."""
        clean_scalars = {
            name: round(value, _SCALAR_DIGITS)
            for name, value in (scalars or {}).items()
            if round(value, _SCALAR_DIGITS) > 0
        }
        clean_ranges = {name: _merge(items) for name, items in (ranges or {}).items()}
        return Resources(clean_scalars, {k: v for k, v in clean_ranges.items() if v})

    @staticmethod
    def parse_spec(spec: str) -> Resources:
        """Parse the agent flag format `cpus:4;mem:4096;disk:10240;ports:[31000-32000]`.

        Raises ResourceError naming the bad item.
        """
        scalars: dict[str, float] = {}
        ranges: dict[str, list[Range]] = {}
        for item in filter(None, (part.strip() for part in spec.split(";"))):
            match = _SPEC_ITEM.match(item)
            if match is None:
                raise ResourceError(f"bad resource {item!r}: expected name:value")
            name, value = match.group(1), match.group(2)
            if value.startswith("["):
                if not value.endswith("]"):
                    raise ResourceError(f"bad ranges for {name!r}: {value!r}")
                for part in filter(None, (p.strip() for p in value[1:-1].split(","))):
                    begin, _, end = part.partition("-")
                    try:
                        pair = (int(begin), int(end or begin))
                    except ValueError as exc:
                        raise ResourceError(f"bad range {part!r} for {name!r}") from exc
                    if pair[0] > pair[1]:
                        raise ResourceError(f"bad range {part!r} for {name!r}")
                    ranges.setdefault(name, []).append(pair)
            else:
                try:
                    scalars[name] = scalars.get(name, 0.0) + float(value)
                except ValueError as exc:
                    raise ResourceError(f"bad scalar {value!r} for {name!r}") from exc
        return Resources.make(scalars, ranges)

    @staticmethod
    def from_json(items: Any) -> Resources:
        """Parse a v1 `[Resource]` list (as in TaskInfo and ExecutorInfo).

        SET and TEXT resources are not modelled and are ignored. Raises ResourceError listing
        every bad item.
        """
        if items is None:
            return Resources()
        if not isinstance(items, list):
            raise ResourceError("resources must be a list")
        scalars: dict[str, float] = {}
        ranges: dict[str, list[Range]] = {}
        problems: list[str] = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                problems.append(f"resource without a name: {item!r}")
                continue
            name, kind = item["name"], item.get("type", "SCALAR")
            try:
                if kind == "SCALAR":
                    value = float(item["scalar"]["value"])
                    if value < 0 or value != value:
                        raise ValueError(value)
                    scalars[name] = scalars.get(name, 0.0) + value
                elif kind == "RANGES":
                    for rng in item["ranges"].get("range", []):
                        pair = (int(rng["begin"]), int(rng["end"]))
                        if pair[0] > pair[1]:
                            raise ValueError(pair)
                        ranges.setdefault(name, []).append(pair)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                problems.append(f"bad {kind} resource {name!r}: {exc!r}")
        if problems:
            raise ResourceError("; ".join(problems))
        return Resources.make(scalars, ranges)

    def to_json(self, allocation_role: str | None = None) -> list[dict[str, Any]]:
        """The v1 `[Resource]` list; `allocation_role` adds `allocation_info` (offers)."""
        out: list[dict[str, Any]] = []
        for name, value in sorted(self.scalars.items()):
            out.append({"name": name, "type": "SCALAR", "scalar": {"value": value}})
        for name, items in sorted(self.ranges.items()):
            out.append(
                {
                    "name": name,
                    "type": "RANGES",
                    "ranges": {"range": [{"begin": b, "end": e} for b, e in items]},
                }
            )
        for resource in out:
            resource["role"] = "*"
            if allocation_role is not None:
                resource["allocation_info"] = {"role": allocation_role}
        return out

    def to_map(self) -> dict[str, Any]:
        """The map form of /master/state: `{"cpus":1.0,"gpus":0.0,"mem":..,"ports":"[..]"}`."""
        out: dict[str, Any] = {"cpus": 0.0, "gpus": 0.0, "mem": 0.0, "disk": 0.0}
        out.update(self.scalars)
        for name, items in self.ranges.items():
            out[name] = format_ranges(items)
        return out

    def __add__(self, other: Resources) -> Resources:
        scalars = dict(self.scalars)
        for name, value in other.scalars.items():
            scalars[name] = scalars.get(name, 0.0) + value
        ranges = {name: list(items) for name, items in self.ranges.items()}
        for name, items in other.ranges.items():
            ranges.setdefault(name, []).extend(items)
        return Resources.make(scalars, ranges)

    def __sub__(self, other: Resources) -> Resources:
        """Subtract, clamping at zero (callers check `contains` first where it matters)."""
        scalars = {
            name: value - other.scalars.get(name, 0.0) for name, value in self.scalars.items()
        }
        ranges = {
            name: _subtract(items, other.ranges.get(name, ()))
            for name, items in self.ranges.items()
        }
        return Resources.make(scalars, ranges)

    def contains(self, other: Resources) -> bool:
        """True if every scalar and range of `other` fits inside this."""
        for name, value in other.scalars.items():
            if round(self.scalars.get(name, 0.0) - value, _SCALAR_DIGITS) < 0:
                return False
        return all(
            _covers(self.ranges.get(name, ()), items) for name, items in other.ranges.items()
        )

    def is_empty(self) -> bool:
        return not self.scalars and not self.ranges

    def allocatable(self) -> bool:
        """Whether a Mesos allocator would offer this leftover at all."""
        return (
            self.scalars.get("cpus", 0.0) >= _MIN_CPUS
            or self.scalars.get("mem", 0.0) >= _MIN_MEM_MB
        )

    def __str__(self) -> str:
        parts = [f"{name}:{value:g}" for name, value in sorted(self.scalars.items())]
        parts += [f"{name}:{format_ranges(items)}" for name, items in sorted(self.ranges.items())]
        return ";".join(parts) or "{}"
