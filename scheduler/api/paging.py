"""Paging of the API's lists (issue 23): apps, jobs, running, ready and failover tasks.

- `?limit=N[&cursor=C]` answers `{"items": [...], "nextCursor": C | null}`: N is 1-1000; C is
  the `nextCursor` of the page before, opaque (the base64url of the list's name and the key of
  the page's last item), and the walk goes on after that key, so an item added or deleted
  meanwhile moves no other item to another page. A limit or cursor that is not one of these is a
  400 naming it; a cursor of another list too.
- Without `limit` the Elastic-Job-Cloud paths answer their plain array as they always did, but
  at most `max_list_items` long; `X-Total-Count` says how many items there are.

Apps and jobs (up to `max_job_bytes` each) are read from ZooKeeper 10 at a time (one multiRead)
while the answer is written out, so one list holds a batch of configurations in memory however
long it is, and concurrent lists of big jobs do not each hold every job (`tests/bench/
bench_list_memory.py`: four concurrent unpaged lists of 300 jobs of 100 KiB raise the leader's
peak by about 90 MiB, against 290 MiB when each answer was built whole; 50 at a time, 130).
The first batch is read before the answer starts, so that a ZooKeeper failure there is still a
JSON error with its status.
"""

from __future__ import annotations

import base64
import binascii
import json
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Response, has_request_context, request
from flask.globals import app_ctx, request_ctx

from scheduler.model.errors import InvalidRequest

__all__ = ["MAX_LIMIT", "Page", "encode_cursor", "keyed_list", "named_list", "page_asked"]

MAX_LIMIT = 1000
BATCH = 10
_CURSOR_MAX_LENGTH = 2048
_LIMIT_PROBLEM = f"must be a whole number from 1 to {MAX_LIMIT}"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Page:
    """A page asked for: at most `limit` items after the item whose key is `after`."""

    limit: int
    after: tuple[str, ...] | None = None


def page_asked(kind: str) -> Page | None:
    """The page the request asks of list `kind`; None without `limit` (the plain array).
    InvalidRequest naming `limit` or `cursor` when one is malformed."""
    limit_text = request.args.get("limit")
    cursor = request.args.get("cursor")
    if limit_text is None:
        if cursor is not None:
            raise InvalidRequest("cursor needs limit", {"cursor": "send limit with it"})
        return None
    text = limit_text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 4) or not (
        1 <= int(text) <= MAX_LIMIT
    ):
        raise InvalidRequest(f"limit {_LIMIT_PROBLEM}", {"limit": _LIMIT_PROBLEM})
    after = None if cursor is None or cursor == "" else _decode_cursor(kind, cursor)
    return Page(int(text), after)


def encode_cursor(kind: str, key: Sequence[str]) -> str:
    """The opaque cursor of the item with `key` in list `kind`."""
    raw = json.dumps([kind, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(kind: str, cursor: str) -> tuple[str, ...]:
    problem = "is not a nextCursor this list gave"
    bad = InvalidRequest(f"cursor {problem}", {"cursor": problem})
    if len(cursor) > _CURSOR_MAX_LENGTH or not cursor.isascii():
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise bad from exc
    if (
        not isinstance(decoded, list)
        or len(decoded) < 2
        or decoded[0] != kind
        or not all(isinstance(part, str) for part in decoded[1:])
    ):
        raise bad
    return tuple(decoded[1:])


def named_list(
    kind: str,
    names: Sequence[str],
    read: Callable[[Sequence[str]], list[dict[str, Any]]],
    max_items: int,
) -> Response:
    """The answer listing the items of `names` (sorted, unique), each read by `read` (a batch of
    names -> the JSON of those that still exist, in order), paged as the request asks; streamed
    a batch at a time. Raises what `read` raises for the first batch, InvalidRequest for a bad
    page."""
    page = page_asked(kind)
    next_cursor: str | None = None
    if page is None:
        chosen = names[:max_items]
    else:
        start = 0 if page.after is None else bisect_right(names, page.after[0])
        chosen = names[start : start + page.limit]
        if chosen and start + page.limit < len(names):
            next_cursor = encode_cursor(kind, [chosen[-1]])
    first = read(chosen[:BATCH])
    read_later = _with_this_request(read)

    def batches() -> Iterator[list[dict[str, Any]]]:
        yield first
        for start in range(BATCH, len(chosen), BATCH):
            yield read_later(chosen[start : start + BATCH])

    return _answer(batches(), page is not None, next_cursor, len(names))


def keyed_list(
    kind: str,
    items: Sequence[_T],
    key: Callable[[_T], tuple[str, ...]],
    to_json: Callable[[_T], dict[str, Any]],
    max_items: int,
) -> Response:
    """The answer listing small `items` already read (any order), sorted by `key` (unique per
    item), paged as the request asks. InvalidRequest for a bad page."""
    ordered = sorted(items, key=key)
    page = page_asked(kind)
    next_cursor: str | None = None
    if page is None:
        chosen = ordered[:max_items]
    else:
        keys = [key(item) for item in ordered]
        start = 0 if page.after is None else bisect_right(keys, page.after)
        chosen = ordered[start : start + page.limit]
        if chosen and start + page.limit < len(ordered):
            next_cursor = encode_cursor(kind, key(chosen[-1]))
    return _answer(
        iter([[to_json(item) for item in chosen]]), page is not None, next_cursor, len(items)
    )


def _with_this_request(
    read: Callable[[Sequence[str]], list[dict[str, Any]]],
) -> Callable[[Sequence[str]], list[dict[str, Any]]]:
    """`read`, called later (while the answer streams, after the view returned) within this
    request's context and its `g` (the caller's role, which a view of an item may read).

    Not `stream_with_context`, which keeps the context pushed until the body is consumed: a
    test client that never reads a body would find it still pushed at its next request."""
    saved_app = app_ctx._get_current_object()  # type: ignore[attr-defined]
    saved_request = request_ctx._get_current_object()  # type: ignore[attr-defined]

    def read_in_request(names: Sequence[str]) -> list[dict[str, Any]]:
        if has_request_context():
            return read(names)
        with saved_app, saved_request.copy():
            return read(names)

    return read_in_request


def _answer(
    batches: Iterator[list[dict[str, Any]]], paged: bool, next_cursor: str | None, total: int
) -> Response:
    def body() -> Iterator[bytes]:
        yield b'{"items":[' if paged else b"["
        first = True
        for batch in batches:
            if batch:
                yield (b"" if first else b",") + b",".join(_dumps(item) for item in batch)
                first = False
        yield (b'],"nextCursor":' + _dumps(next_cursor) + b"}") if paged else b"]"

    response = Response(body(), mimetype="application/json")
    response.headers["X-Total-Count"] = str(total)
    return response


def _dumps(value: object) -> bytes:
    # As Flask's jsonify writes it here (compact, ASCII, keys in the model's order).
    return json.dumps(value, separators=(",", ":")).encode()
