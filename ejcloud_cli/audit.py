"""`ejcloud audit`: the audit log's records, newest first (`GET /api/audit`, issue 26).

The filters are sent as the server takes them (`--since`/`--until` as ISO 8601 times or epoch
milliseconds); `--limit` records are read a page at a time (the server's pages are at most
1000), following `nextCursor`. A table by default; `--json` prints the records as the API
answers them, as one JSON list.
"""

from __future__ import annotations

from typing import Any

import click

from ejcloud_cli.context import State, json_option
from ejcloud_cli.errors import ApiError
from ejcloud_cli.output import format_time, objects

MAX_RECORDS = 100_000
_PAGE = 1000
AUDIT_HEADERS = (
    "TIME_UTC",
    "ACTOR",
    "SOURCE",
    "ACTION",
    "RESOURCE",
    "OUTCOME",
    "STATUS",
    "REQUEST",
)
_FILTERS = ("actor", "app", "job", "action", "outcome", "since", "until")


def audit_row(record: dict[str, Any]) -> tuple[Any, ...]:
    """One record as a table row."""
    time = record.get("time")
    return (
        format_time(time) if time is not None else None,
        record.get("actor"),
        record.get("source"),
        record.get("action"),
        record.get("resource"),
        record.get("outcome"),
        record.get("status"),
        record.get("requestId"),
    )


@click.command("audit")
@click.option("--actor", help="Only this actor (user:NAME, token:ID, anonymous, unknown).")
@click.option("--app", help="Only records of this app.")
@click.option("--job", help="Only records of this job.")
@click.option("--action", help="Only this action (job.update, grant.create, ...).")
@click.option("--outcome", type=click.Choice(["ok", "denied", "error"]), help="Only this outcome.")
@click.option("--since", help="From this time on (ISO 8601, e.g. 2026-11-26T19:00:00Z).")
@click.option("--until", help="Before this time (ISO 8601).")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(1, MAX_RECORDS),
    default=50,
    show_default=True,
    help="How many records at most.",
)
@json_option
@click.pass_obj
def audit_command(state: State, /, limit: int, **filters: str | None) -> None:
    """Show the audit log: who changed what, and who was refused (newest first). A
    cluster-admin sees every record, an app-admin those of its apps."""
    base: dict[str, str | int] = {k: v for k, v in filters.items() if k in _FILTERS and v}
    client = state.client()
    records: list[dict[str, Any]] = []
    cursor = ""
    while len(records) < limit:
        query: dict[str, str | int] = {**base, "limit": min(_PAGE, limit - len(records))}
        if cursor:
            query["cursor"] = cursor
        page = client.call("GET", "/api/audit", query=query)
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise ApiError(200, "GET /api/audit: the answer holds no list of records")
        records += objects(page["items"])
        following = page.get("nextCursor")
        if not following or not isinstance(following, str):
            break
        cursor = following
    records = records[:limit]
    state.show_table(records, AUDIT_HEADERS, [audit_row(r) for r in records], "no audit records")
