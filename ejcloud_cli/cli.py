"""The `ejcloud` command: global options, `status`, `package`, and the command groups."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import click

from ejcloud_cli.access import grant_group, token_group, user_group
from ejcloud_cli.apps import app_group
from ejcloud_cli.audit import audit_command
from ejcloud_cli.calendars import calendar_group
from ejcloud_cli.client import ApiClient
from ejcloud_cli.context import State, json_option
from ejcloud_cli.errors import EXIT_CONNECT, EXIT_ERROR, EXIT_OK, ConnectFailed, UsageProblem
from ejcloud_cli.jobs import job_group
from ejcloud_cli.output import clean, render_fields, render_table, to_json_text
from ejcloud_cli.pools import pool_group
from ejcloud_cli.runs import logs_command, runs_command
from ejcloud_cli.settings import Flags, config_file_path, parse_servers
from ejcloud_cli.workflows import workflow_group

# A leader identity as /health names it, before it becomes a URL to read.
_HOST_PORT = re.compile(r"^[A-Za-z0-9._-]+:[0-9]{1,5}$|^\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}$")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "-s",
    "--server",
    "servers",
    multiple=True,
    metavar="URL",
    help="Scheduler replica URL(s), repeated or comma-separated [env EJCLOUD_SERVER; "
    "default http://127.0.0.1:8899].",
)
@click.option("-u", "--user", help="API user [env EJCLOUD_USER].")
@click.option("--password", help="API password [env EJCLOUD_PASSWORD; asked when missing].")
@click.option(
    "--token",
    metavar="TOKEN",
    help="API token, sent instead of user and password [env EJCLOUD_TOKEN, safer than this "
    "flag: others may see a command line].",
)
@click.option(
    "--timeout", type=float, metavar="SECONDS", help="Per request [env EJCLOUD_TIMEOUT; 10]."
)
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="Config file [env EJCLOUD_CONFIG; default $XDG_CONFIG_HOME/ejcloud/config.toml].",
)
@click.option(
    "--cacert",
    metavar="PATH",
    help="PEM certificate(s) to verify https servers against [env EJCLOUD_CACERT; default: "
    "the system's].",
)
@click.option("--json", "json_output", is_flag=True, help="Print JSON for scripts.")
@click.version_option(package_name="ejcloud", prog_name="ejcloud")
@click.pass_context
def cli(
    ctx: click.Context,
    servers: tuple[str, ...],
    user: str | None,
    password: str | None,
    token: str | None,
    timeout: float | None,
    config_path: str | None,
    cacert: str | None,
    json_output: bool,
) -> None:
    """Command-line client of the ejcloud scheduler's REST API.

    It finds the acting leader among the --server replicas and follows a standby's redirect
    with its credentials. Exit codes: 0 done, 1 error answer, 2 usage, 3 cannot connect,
    4 not found, 5 not allowed (401/403), 6 conflict (409).
    """
    state = ctx.ensure_object(State)
    state.flags = Flags(tuple(servers), user, password, timeout, config_path, cacert, token)
    state.json_output = state.json_output or json_output


cli.add_command(app_group)
cli.add_command(job_group)
cli.add_command(runs_command)
cli.add_command(logs_command)
cli.add_command(audit_command)
cli.add_command(workflow_group)
cli.add_command(pool_group)  # issue 28
cli.add_command(calendar_group)  # issue 28
cli.add_command(user_group)
cli.add_command(grant_group)
cli.add_command(token_group)


@dataclass(frozen=True)
class Probe:
    """What one replica's `/health` said (or why it said nothing)."""

    server: str
    status: int | None
    health: dict[str, Any] | None
    error: str | None
    discovered: bool = False

    @property
    def identity(self) -> str | None:
        return _text(self.health, "identity")

    @property
    def leader(self) -> str | None:
        return _text(self.health, "leader")

    def healthy(self) -> bool:
        return self.status == 200 and self.health is not None

    def row(self) -> tuple[Any, ...]:
        h = self.health or {}
        term = h.get("term")
        if self.error is not None:
            health = f"unreachable: {self.error}"
        elif self.status == 200:
            health = "ok"
        else:
            health = f"unhealthy: {h.get('reason') or self.status}"
        return (
            self.server + (" (leader)" if self.discovered else ""),
            h.get("role"),
            h.get("leader"),
            h.get("zookeeper"),
            h.get("mesos"),
            term.get("number") if isinstance(term, dict) else None,
            health,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "status": self.status,
            "health": self.health,
            "error": self.error,
            "discovered": self.discovered,
        }


def _text(health: dict[str, Any] | None, key: str) -> str | None:
    value = (health or {}).get(key)
    return value if isinstance(value, str) and value else None


def _origin(base: str) -> str:
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{rest.split('/')[0]}"


def _probe(client: ApiClient, base: str, named_by: str | None = None) -> Probe:
    """`base`'s /health, with the credentials where they may go (`ApiClient.health`): the
    term and other details are shown to authenticated callers only."""
    discovered = named_by is not None
    try:
        answer = client.health(base, named_by)
    except ConnectFailed as exc:
        reason = exc.message.removeprefix(f"{_origin(base)}: ")
        return Probe(base, None, None, reason, discovered)
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return Probe(
            base, answer.status, None, f"answered {answer.status}, not /health", discovered
        )
    return Probe(base, answer.status, body, None, discovered)


@cli.command("status")
@json_option
@click.pass_obj
def status_command(state: State) -> int:
    """Show each replica's role, the leader, and the ZooKeeper and Mesos state.

    Reads /health of every --server (and of the leader they name, when it is not one of
    them), with the credentials, so that the leader's TERM is shown (/health shows it only to
    an authenticated caller). Exit code 0 when every replica is healthy and they agree on one
    leader, 1 when not, 3 when none answers.
    """
    settings = state.settings(prompt=False)
    client = ApiClient(settings)
    probes = [_probe(client, base) for base in settings.servers]
    known = {p.identity for p in probes if p.identity}
    leaders = sorted({p.leader for p in probes if p.leader})
    for leader in leaders:
        if leader in known or not _HOST_PORT.match(leader):
            continue
        named_by = next(p.server for p in probes if p.leader == leader)
        scheme = named_by.split("://")[0]
        try:
            (base,) = parse_servers([f"{scheme}://{leader}"], "leader")
        except UsageProblem:
            continue
        probes.append(_probe(client, base, named_by=named_by))
    answered = [p for p in probes if p.status is not None]
    ok = bool(answered) and all(p.healthy() for p in probes) and len(leaders) == 1
    if state.json_output:
        leader_value = leaders[0] if len(leaders) == 1 else None
        body = {"ok": ok, "leader": leader_value, "servers": [p.to_json() for p in probes]}
        click.echo(to_json_text(body))
    else:
        headers = ("SERVER", "ROLE", "LEADER", "ZOOKEEPER", "MESOS", "TERM", "HEALTH")
        click.echo(render_table(headers, [p.row() for p in probes]))
        if len(leaders) == 1:
            click.echo(f"leader: {clean(leaders[0])}")
        elif leaders:
            click.echo(f"replicas disagree on the leader: {clean(', '.join(leaders))}")
        else:
            click.echo("no acting leader is known")
    if not answered:
        return EXIT_CONNECT
    return EXIT_OK if ok else EXIT_ERROR


@cli.command("config")
@json_option
@click.pass_obj
def config_command(state: State) -> None:
    """Show where the CLI connects, as whom, and where each setting came from.

    Sources: flag, env, file (the config file), prompt, default. The password and the token
    are never shown.
    """
    settings = state.settings(prompt=False)
    path, _ = config_file_path(state.flags, state.env)
    data = {**settings.describe(), "configFile": str(path)}
    sources = settings.sources
    state.show(
        data,
        lambda: render_fields(
            [
                ("servers", f"{', '.join(settings.servers)} ({sources['server']})"),
                ("user", f"{settings.user or '-'} ({sources['user']})"),
                ("password", f"{data['password'] or '-'} ({sources['password']})"),
                ("token", f"{data.get('token') or '-'} ({sources.get('token', 'default')})"),
                ("timeout", f"{settings.timeout_s:g} s ({sources['timeout']})"),
                ("config file", str(path)),
            ]
        ),
    )


@cli.command("package")
@click.argument("src_dir")
@click.argument("out")
@click.option(
    "--bundle-executor",
    is_flag=True,
    help="Copy the executor package into the archive (agents then need only pymesos).",
)
@click.option(
    "--python",
    "python_path",
    metavar="PATH",
    help="Interpreter bin/start.sh uses unless EJC_PYTHON is set (default: python3).",
)
def package_command(src_dir: str, out: str, bundle_executor: bool, python_path: str | None) -> int:
    """Build an app archive (appURL) with bin/start.sh (bootstrapScript) from SRC_DIR.

    The same as `python -m executor.package SRC_DIR OUT`: exit code 2 when the folder cannot
    be packaged.
    """
    # Imported here: only this command needs the executor's packaging.
    from executor import package

    argv = ["--bundle-executor"] if bundle_executor else []
    if python_path is not None:
        argv += ["--python", python_path]
    return package.main([*argv, "--", src_dir, out])
