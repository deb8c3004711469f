"""`scheduler.api.paging` on a bare Flask app (no ZooKeeper): pages, cursors, the capped plain
array, and later batches read within the request's own context."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from flask import Flask, Response, g

from scheduler.api.errors import install_error_handlers
from scheduler.api.paging import BATCH, encode_cursor, keyed_list, named_list

NAMES = [f"n{i:03d}" for i in range(BATCH * 3 + 5)]


def _app(reads: list[int]) -> Flask:
    app = Flask("paging")
    install_error_handlers(app)

    def read(names: Sequence[str]) -> list[dict[str, Any]]:
        reads.append(len(names))
        return [{"name": n, "role": g.role} for n in names]

    @app.get("/named")
    def named() -> Response:
        g.role = "guest"
        return named_list("named", NAMES, read, max_items=7)

    @app.get("/keyed")
    def keyed() -> Response:
        items = [("b", 2), ("a", 10), ("a", 9)]
        return keyed_list("keyed", items, lambda i: (i[0], f"{i[1]:03d}"), lambda i: {"k": i}, 2)

    return app


def test_a_walk_reads_a_batch_at_a_time_within_the_request() -> None:
    reads: list[int] = []
    client = _app(reads).test_client()
    answer = client.get(f"/named?limit={len(NAMES)}", buffered=False)
    client.get("/named")  # another request while the first body is still unread
    page = json.loads(b"".join(answer.response))  # type: ignore[arg-type]
    assert [item["name"] for item in page["items"]] == NAMES and page["nextCursor"] is None
    assert {item["role"] for item in page["items"]} == {"guest"}  # g of its own request
    assert max(reads) == BATCH


def test_pages_follow_the_cursor_and_the_plain_array_is_capped() -> None:
    client = _app([]).test_client()
    first = client.get("/named?limit=30").json
    assert first is not None and len(first["items"]) == 30
    assert first["nextCursor"] == encode_cursor("named", [NAMES[29]])
    rest = client.get(f"/named?limit=30&cursor={first['nextCursor']}").json
    assert rest is not None and [i["name"] for i in rest["items"]] == NAMES[30:]
    plain = client.get("/named")
    assert plain.json is not None and len(plain.json) == 7
    assert plain.headers["X-Total-Count"] == str(len(NAMES))
    other = client.get(f"/keyed?limit=1&cursor={first['nextCursor']}")
    assert other.status_code == 400 and "cursor" in other.json["fields"]  # type: ignore[index]


def test_keyed_items_page_in_key_order() -> None:
    client = _app([]).test_client()
    first = client.get("/keyed?limit=2").json
    assert first is not None
    assert [i["k"] for i in first["items"]] == [["a", 9], ["a", 10]]
    last = client.get(f"/keyed?limit=2&cursor={first['nextCursor']}").json
    assert last == {"items": [{"k": ["b", 2]}], "nextCursor": None}
    assert client.get("/keyed").headers["X-Total-Count"] == "3"
