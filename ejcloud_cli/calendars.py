"""`ejcloud calendar ...`: named calendars (issue 28), the periods the jobs that list them in
`excludeCalendars` do not fire in.

add, update, get, list and delete map to `POST /api/calendar`, `PUT /api/calendar/{name}`,
`GET /api/calendar/{name}`, `GET /api/calendars` and `DELETE /api/calendar/{name}`. A calendar
is given as a JSON or YAML file with the API's field names (`calendarName`, `timeZone`,
`excludeDates`, `excludeRanges`, `weekly`, `yearly`), exactly what `calendar get NAME --json`
prints, and/or as an iCalendar file (`--ics`), whose events the server converts.
"""

from __future__ import annotations

from typing import Any

import click

from ejcloud_cli import paging
from ejcloud_cli.context import State, confirm, json_option, segment
from ejcloud_cli.errors import UsageProblem
from ejcloud_cli.output import objects, ordered_fields, render_fields, render_table
from ejcloud_cli.paging import PAGE_SIZE
from ejcloud_cli.specs import build_body, load_spec, read_bounded

ICS_MAX_BYTES = 256 * 1024
"""The server's bound of an `ics` text: a larger file is refused here, before it is sent."""
_FIELD_ORDER = ("calendarName", "timeZone", "usedBy", "usedByWorkflows")
_PARTS = ("excludeDates", "excludeRanges", "weekly", "yearly")
# Read-only fields a `get --json` holds that a body must not carry.
_SHOWN_ONLY = ("usedBy", "usedByWorkflows")


@click.group("calendar")
def calendar_group() -> None:
    """Calendars: excluded dates, ranges, weekly windows and yearly dates that jobs skip."""


def _path(name: str) -> str:
    return f"/api/calendar/{segment(name)}"


def _read_ics(source: str, state: State) -> str:
    name = "stdin" if source == "-" else source
    raw = read_bounded(source, state.stdin(), ICS_MAX_BYTES)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageProblem(f"{name} is not UTF-8 text") from exc


_options = [
    click.option(
        "-f",
        "--file",
        "spec_file",
        help="The calendar as a JSON or YAML file ('-': stdin), as `calendar get --json` prints.",
    ),
    click.option(
        "--ics",
        "ics_file",
        help="An iCalendar (.ics) file ('-': stdin): its events become excluded dates, ranges "
        "and yearly dates (added to the file's).",
    ),
    click.option("--name", "name", help="calendarName (else the file's)."),
    click.option("--time-zone", help="timeZone: the IANA zone of its dates and wall times."),
]


def _calendar_options(func: Any) -> Any:
    for option in reversed(_options):
        func = option(func)
    return json_option(click.pass_obj(func))


def _body(
    state: State,
    name: str | None,
    spec_file: str | None,
    ics_file: str | None,
    time_zone: str | None,
) -> dict[str, Any]:
    if spec_file == "-" and ics_file == "-":
        raise UsageProblem("only one of -f and --ics can read stdin")
    spec = load_spec(spec_file, state.stdin()) if spec_file else None
    flags: dict[str, Any] = {"timeZone": time_zone}
    if ics_file:
        flags["ics"] = _read_ics(ics_file, state)
    body = build_body("calendarName", name, spec, {}, flags)
    for key in _SHOWN_ONLY:
        body.pop(key, None)
    return body


@calendar_group.command("add")
@_calendar_options
def add_calendar(
    state: State,
    /,
    spec_file: str | None,
    ics_file: str | None,
    name: str | None,
    time_zone: str | None,
) -> None:
    """Register a calendar from a file (-f) and/or an iCalendar file (--ics).

    \b
    ejcloud calendar add -f holidays.json
    ejcloud calendar add --ics holidays.ics --name holidays --time-zone Europe/Berlin
    """
    if not spec_file and not ics_file:
        raise UsageProblem("give the calendar with -f FILE and/or --ics FILE.ics")
    body = _body(state, name, spec_file, ics_file, time_zone)
    found = state.client().call("POST", "/api/calendar", body=body)
    name = body["calendarName"]
    state.done(
        f"calendar {name} registered{_summary(found)}", action="registered", calendarName=name
    )


@calendar_group.command("update")
@_calendar_options
def update_calendar(
    state: State,
    /,
    spec_file: str | None,
    ics_file: str | None,
    name: str | None,
    time_zone: str | None,
) -> None:
    """Replace a calendar by what -f and/or --ics give; with only --time-zone, change its zone.

    A calendar is one definition: its parts are what the files give, not added to the stored
    ones (`calendar get NAME --json > c.json`, edit, `calendar update -f c.json` to add some).
    """
    body = _body(state, name, spec_file, ics_file, time_zone)
    calendar_name = body["calendarName"]
    client = state.client()
    if not spec_file and not ics_file:
        if time_zone is None:
            raise UsageProblem("nothing to update: give -f, --ics or --time-zone")
        current = client.call("GET", _path(calendar_name))
        body = {**(current if isinstance(current, dict) else {}), **body}
        for key in _SHOWN_ONLY:
            body.pop(key, None)
    found = client.call("PUT", _path(calendar_name), body=body)
    state.done(
        f"calendar {calendar_name} updated{_summary(found)}",
        action="updated",
        calendarName=calendar_name,
    )


def _summary(found: Any) -> str:
    """` (2 dates, 1 range, ...)`: what the server stored, as counts."""
    if not isinstance(found, dict):
        return ""
    words = {
        "excludeDates": "date",
        "excludeRanges": "range",
        "weekly": "weekly window",
        "yearly": "yearly date",
    }
    counts = [
        f"{len(found[key])} {word}{'' if len(found[key]) == 1 else 's'}"
        for key, word in words.items()
        if isinstance(found.get(key), list) and found[key]
    ]
    return f" ({', '.join(counts)})" if counts else ""


def _render(found: Any) -> str:
    fields = []
    for key, value in ordered_fields(found, _FIELD_ORDER):
        if key in _PARTS:
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        fields.append((key, value))
    rows: list[tuple[Any, ...]] = []
    parts = found if isinstance(found, dict) else {}
    for day in parts.get("excludeDates") or []:
        rows.append(("date", day, ""))
    for excluded in objects(parts.get("excludeRanges")):
        rows.append(("range", excluded.get("from"), excluded.get("to")))
    for window in objects(parts.get("weekly")):
        days = ",".join(str(d) for d in window.get("days") or [])
        rows.append(("weekly", f"{days} {window.get('from')}", window.get("to")))
    for day in parts.get("yearly") or []:
        rows.append(("yearly", day, ""))
    table = render_table(("KIND", "FROM", "TO"), rows) if rows else "excludes nothing"
    return render_fields(fields) + "\n\n" + table


@calendar_group.command("get")
@click.argument("name")
@json_option
@click.pass_obj
def get_calendar(state: State, name: str) -> None:
    """Show a calendar: its parts and the jobs that list it (--json: ready for `update -f`)."""
    found = state.client().call("GET", _path(name))
    state.show(found, lambda: _render(found))


@calendar_group.command("list")
@json_option
@click.pass_obj
def list_calendars(state: State) -> None:
    """List the calendars with the size of each part, in name order."""
    found = list(paging.walk(state.client(), "/api/calendars", PAGE_SIZE))

    def size(c: dict[str, Any], key: str) -> int:
        value = c.get(key)
        return len(value) if isinstance(value, list) else 0

    rows = [
        (c.get("calendarName"), c.get("timeZone"), *(size(c, key) for key in _PARTS))
        for c in objects(found)
    ]
    headers = ("NAME", "TIME_ZONE", "DATES", "RANGES", "WEEKLY", "YEARLY")
    state.show_table(found, headers, rows, "no calendars")


@calendar_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_calendar(state: State, name: str, yes: bool) -> None:
    """Delete a calendar (refused while a job or workflow lists it: take it out first)."""
    confirm(f"Delete calendar {name}?", yes)
    state.client().call("DELETE", _path(name))
    state.done(f"calendar {name} deleted", action="deleted", calendarName=name)
