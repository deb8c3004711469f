"""`ejcloud pool ...`: concurrency pools (issue 28), named numbers of slots shared by jobs.

add, resize, get, list and delete map to `POST /api/pool`, `PUT /api/pool/{name}`,
`GET /api/pool/{name}`, `GET /api/pools` and `DELETE /api/pool/{name}`. A job joins a pool with
its `pool` (and `poolSlots`) fields: `ejcloud job update JOB --set pool=NAME`.
"""

from __future__ import annotations

from typing import Any

import click

from ejcloud_cli import paging
from ejcloud_cli.context import State, confirm, json_option, segment
from ejcloud_cli.output import objects, ordered_fields, render_fields
from ejcloud_cli.paging import PAGE_SIZE

_FIELD_ORDER = ("poolName", "size", "inUse", "waiting", "jobs")
_SIZE = click.option(
    "--size",
    required=True,
    type=click.IntRange(min=1),
    help="Slots: how many tasks of the pool's jobs (times their poolSlots) may run at once.",
)


@click.group("pool")
def pool_group() -> None:
    """Concurrency pools: at most SIZE slots of their jobs' tasks run at once."""


def _path(name: str) -> str:
    return f"/api/pool/{segment(name)}"


def _fields(found: Any) -> str:
    fields = []
    for key, value in ordered_fields(found, _FIELD_ORDER):
        if key == "jobs" and isinstance(value, list):
            value = ", ".join(str(job) for job in value) or "-"
        fields.append((key, value))
    return render_fields(fields)


@pool_group.command("add")
@click.argument("name")
@_SIZE
@json_option
@click.pass_obj
def add_pool(state: State, name: str, size: int) -> None:
    """Create the pool NAME of --size slots.

    \b
    ejcloud pool add db --size 3
    """
    state.client().call("POST", "/api/pool", body={"poolName": name, "size": size})
    state.done(f"pool {name} created ({size} slots)", action="created", poolName=name, size=size)


@pool_group.command("resize")
@click.argument("name")
@_SIZE
@json_option
@click.pass_obj
def resize_pool(state: State, name: str, size: int) -> None:
    """Change the pool's size (refused below what one run of one of its jobs takes). Tasks
    running go on; a smaller pool launches nothing until it has drained below its size."""
    state.client().call("PUT", _path(name), body={"size": size})
    state.done(f"pool {name} resized to {size} slots", action="resized", poolName=name, size=size)


@pool_group.command("get")
@click.argument("name")
@json_option
@click.pass_obj
def get_pool(state: State, name: str) -> None:
    """Show a pool: its size, the slots in use, the runs waiting and its jobs."""
    found = state.client().call("GET", _path(name))
    state.show(found, lambda: _fields(found))


@pool_group.command("list")
@json_option
@click.pass_obj
def list_pools(state: State) -> None:
    """List the pools with their use, in name order."""
    found = list(paging.walk(state.client(), "/api/pools", PAGE_SIZE))
    rows = [
        (p.get("poolName"), p.get("size"), p.get("inUse"), p.get("waiting")) for p in objects(found)
    ]
    state.show_table(found, ("NAME", "SIZE", "IN_USE", "WAITING"), rows, "no pools")


@pool_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_pool(state: State, name: str, yes: bool) -> None:
    """Delete a pool (refused while a job names it: take the jobs out first)."""
    confirm(f"Delete pool {name}?", yes)
    state.client().call("DELETE", _path(name))
    state.done(f"pool {name} deleted", action="deleted", poolName=name)
