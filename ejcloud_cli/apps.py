"""`ejcloud app ...`: list, show, add, update, enable, disable and delete apps."""

from __future__ import annotations

from typing import Any

import click

from ejcloud_cli import paging
from ejcloud_cli.context import State, confirm, json_option, segment, spec_options
from ejcloud_cli.errors import UsageProblem
from ejcloud_cli.output import objects, ordered_fields, render_fields
from ejcloud_cli.specs import build_body, load_spec, parse_sets

_FIELD_ORDER = (
    "appName",
    "appURL",
    "bootstrapScript",
    "cpuCount",
    "memoryMB",
    "appCacheEnable",
    "eventTraceSamplingCount",
)


@click.group("app")
def app_group() -> None:
    """Apps: the archive of job code Mesos fetches and the command that starts its executor."""


@app_group.command("list")
@json_option
@click.pass_obj
def list_apps(state: State) -> None:
    """List the registered apps, in name order."""
    apps = list(paging.walk(state.client(), "/api/app/list"))
    rows = [
        (
            a.get("appName"),
            a.get("cpuCount"),
            a.get("memoryMB"),
            a.get("bootstrapScript"),
            a.get("appURL"),
        )
        for a in objects(apps)
    ]
    state.show_table(apps, ("NAME", "CPUS", "MEM_MB", "BOOTSTRAP", "URL"), rows, "no apps")


@app_group.command("show")
@click.argument("name")
@json_option
@click.pass_obj
def show_app(state: State, name: str) -> None:
    """Show one app (with --json: exactly its JSON, ready for `app update -f`)."""
    client = state.client()
    app = client.call("GET", f"/api/app/{segment(name)}")
    if state.json_output:
        state.show(app, lambda: "")
        return
    disabled = client.call("GET", f"/api/app/{segment(name)}/disable")
    fields = [*ordered_fields(app, _FIELD_ORDER), ("disabled", disabled)]
    state.show(app, lambda: render_fields(fields))


_app_fields = spec_options(
    "app",
    [
        click.option("--url", "app_url", help="appURL: where Mesos fetches the app archive."),
        click.option("--bootstrap", help="bootstrapScript: starts the executor (bin/start.sh)."),
        click.option("--cpu", type=float, help="cpuCount of the executor, per agent."),
        click.option("--memory", type=float, help="memoryMB of the executor, per agent."),
        click.option("--cache/--no-cache", default=None, help="appCacheEnable."),
        click.option("--trace-sampling", type=int, help="eventTraceSamplingCount."),
    ],
)


def _body(state: State, name: str | None, spec_file: str | None, **flags: Any) -> dict[str, Any]:
    spec = load_spec(spec_file, state.stdin()) if spec_file else None
    return build_body(
        "appName",
        name,
        spec,
        parse_sets(flags.pop("sets")),
        {
            "appURL": flags["app_url"],
            "bootstrapScript": flags["bootstrap"],
            "cpuCount": flags["cpu"],
            "memoryMB": flags["memory"],
            "appCacheEnable": flags["cache"],
            "eventTraceSamplingCount": flags["trace_sampling"],
        },
    )


@app_group.command("add")
@click.argument("name", required=False)
@_app_fields
@click.pass_obj
def add_app(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Register an app from a file (-f) and/or flags.

    \b
    ejcloud app add demo_app --url file:///tmp/demo_app.tar.gz --bootstrap bin/start.sh \\
        --cpu 0.1 --memory 64
    """
    body = _body(state, name, spec_file, **flags)
    state.client().call("POST", "/api/app", body=body)
    state.done(f"app {body['appName']} registered", action="registered", appName=body["appName"])


@app_group.command("update")
@click.argument("name", required=False)
@_app_fields
@click.pass_obj
def update_app(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Change fields of an app; the fields not given keep their values."""
    body = _body(state, name, spec_file, **flags)
    if len(body) < 2:
        raise UsageProblem("nothing to update: give fields with flags, --set or -f")
    state.client().call("PUT", "/api/app", body=body)
    state.done(f"app {body['appName']} updated", action="updated", appName=body["appName"])


@app_group.command("enable")
@click.argument("name")
@json_option
@click.pass_obj
def enable_app(state: State, name: str) -> None:
    """Enable an app (its jobs fire again)."""
    state.client().call("POST", f"/api/app/{segment(name)}/enable")
    state.done(f"app {name} enabled", action="enabled", appName=name)


@app_group.command("disable")
@click.argument("name")
@json_option
@click.pass_obj
def disable_app(state: State, name: str) -> None:
    """Disable an app: none of its jobs fires, and their pending runs are dropped."""
    state.client().call("POST", f"/api/app/{segment(name)}/disable")
    state.done(f"app {name} disabled", action="disabled", appName=name)


@app_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_app(state: State, name: str, yes: bool) -> None:
    """Delete an app with all its jobs, and stop its executors."""
    confirm(f"Delete app {name} and all of its jobs?", yes)
    state.client().call("DELETE", f"/api/app/{segment(name)}")
    state.done(f"app {name} deleted with its jobs", action="deleted", appName=name)
