"""What the CLI prints: tables and fields for people, JSON for scripts, times and durations.

Text that comes from a server is shown with its control characters escaped (`\\x1b`), so an
app's description or an error message cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Epoch numbers above this are milliseconds (it is in 5138 as seconds, in 1973 as milliseconds).
_MILLIS_FROM = 1e11


def clean(text: str) -> str:
    """`text` with control characters (newlines and tabs too) escaped as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell(value: Any) -> str:
    """How one value looks in a table or a field list: `-` for none, yes/no for booleans,
    numbers without a needless `.0`, JSON for lists and objects."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | dict):
        return clean(json.dumps(value, sort_keys=True))
    return clean(str(value))


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain table: a header line, then one line per row, columns two spaces apart (the last
    column unpadded). Values go through `cell`."""
    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = []
    for row in [list(headers), *text_rows]:
        padded = [value.ljust(widths[i]) for i, value in enumerate(row[:-1])]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def render_fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """`name: value` lines with the values aligned."""
    items = [(clean(name), cell(value)) for name, value in pairs]
    width = max((len(name) for name, _ in items), default=0)
    return "\n".join(f"{(name + ':').ljust(width + 1)} {value}" for name, value in items)


def objects(data: Any) -> list[dict[str, Any]]:
    """The objects in `data` when it is a list (anything else in it is left out), else none."""
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def ordered_fields(obj: Any, order: Sequence[str]) -> list[tuple[str, Any]]:
    """The fields of `obj` (an object), those named in `order` first and in that order."""
    if not isinstance(obj, dict):
        return []
    known = [(k, obj[k]) for k in order if k in obj]
    return known + [(k, v) for k, v in obj.items() if k not in order]


def to_json_text(value: Any) -> str:
    """`value` as indented JSON (non-ASCII escaped, so nothing reaches the terminal raw)."""
    return json.dumps(value, indent=2)


def parse_time(value: Any) -> datetime | None:
    """A UTC time from an ISO 8601 string (`2024-03-01T10:00:00.000Z`, an offset, or naive =
    UTC), `yyyy-MM-dd HH:mm:ss`, or epoch seconds or milliseconds; None when it is none of
    these."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        seconds = value / 1000 if abs(value) >= _MILLIS_FROM else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        try:
            return parse_time(float(text))
        except ValueError:
            return None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found.astimezone(UTC)


def format_time(value: Any) -> str:
    """`value` as `YYYY-MM-DD HH:MM:SS` UTC when `parse_time` understands it, else as given."""
    found = parse_time(value)
    if found is None:
        return cell(value)
    return found.strftime("%Y-%m-%d %H:%M:%S")


def format_duration(seconds: float | None) -> str:
    """`0.35s`, `12.0s`, `3m04s`, `2h05m`, `3d04h`; `-` for None or a negative span."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
