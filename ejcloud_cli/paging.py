"""Walking the server's paged lists (`?limit=&cursor=`, issue 23) a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ejcloud_cli.client import ApiClient
from ejcloud_cli.errors import ApiError

PAGE_SIZE = 500


def walk(client: ApiClient, path: str, page_size: int = PAGE_SIZE) -> Iterator[Any]:
    """Every item of the list at `path`, asked a page of `page_size` at a time. A server older
    than paging answers its whole plain array to the first request; that is walked as it is.
    Raises what `ApiClient.call` raises, and ApiError when a page is not the paged shape."""
    cursor = ""
    while True:
        query: dict[str, str | int] = {"limit": page_size}
        if cursor:
            query["cursor"] = cursor
        page = client.call("GET", path, query=query)
        if isinstance(page, list):  # an older server: the whole list at once
            yield from page
            return
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise ApiError(200, f"GET {path}: the server answered a page of an unknown shape")
        yield from page["items"]
        following = page.get("nextCursor")
        if not following or not isinstance(following, str):
            return
        cursor = following
