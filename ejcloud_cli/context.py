"""What every command shares: the resolved connection, the client, and how results are printed."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar
from urllib.parse import quote

import click

from ejcloud_cli.client import ApiClient
from ejcloud_cli.errors import CliError, UsageProblem
from ejcloud_cli.output import clean, render_table, to_json_text
from ejcloud_cli.settings import (
    ConnectionSettings,
    Flags,
    config_file_path,
    read_config_file,
    resolve,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    """One invocation's state, built by the root command and handed to every subcommand.

    The connection is resolved on first use, so commands that need no server (`package`,
    `--help`) work whatever the config file holds.
    """

    flags: Flags = field(default_factory=Flags)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    json_output: bool = False
    _settings: ConnectionSettings | None = None
    _client: ApiClient | None = None
    _unprompted: bool = False

    def settings(self, prompt: bool = True) -> ConnectionSettings:
        """The connection settings; UsageProblem for a bad flag, variable or config file.

        With `prompt`, a user without a password is asked for one on a terminal (UsageProblem
        without a terminal); without, the password stays unset (for commands that send none).
        """
        if self._settings is None or (prompt and self._unprompted):
            path, required = config_file_path(self.flags, self.env)
            config = read_config_file(path, required)
            for warning in config.warnings:
                click.echo(f"ejcloud: warning: {warning}", err=True)
            settings = resolve(self.flags, self.env, config)
            self._unprompted = settings.user is not None and settings.password is None
            if prompt and self._unprompted:
                settings = _with_prompted_password(settings)
                self._unprompted = False
            self._settings = settings
        return self._settings

    def has_user(self) -> bool:
        """Whether credentials (a user or a token) were resolved (False also before the first
        request)."""
        settings = self._settings
        return settings is not None and (settings.user is not None or settings.token is not None)

    def client(self) -> ApiClient:
        if self._client is None:
            self._client = ApiClient(self.settings())
        return self._client

    def stdin(self) -> IO[bytes]:
        return sys.stdin.buffer

    def done(self, human: str, **facts: Any) -> None:
        """Report a write that succeeded: `human` for people, `{"ok": true, **facts}` with
        `--json`."""
        if self.json_output:
            click.echo(to_json_text({"ok": True, **facts}))
        else:
            click.echo(clean(human))

    def show(self, data: Any, human: Callable[[], str]) -> None:
        """Print `data` as JSON with `--json`, else what `human()` renders (if anything)."""
        if self.json_output:
            click.echo(to_json_text(data))
        else:
            text = human()
            if text:
                click.echo(text)

    def show_table(
        self,
        data: Any,
        headers: Sequence[str],
        rows: Sequence[Sequence[Any]],
        empty_note: str,
    ) -> None:
        """Print `data` as JSON with `--json`, else a table of `rows` (or `empty_note` on
        stderr when there are none)."""
        if self.json_output:
            click.echo(to_json_text(data))
        elif rows:
            click.echo(render_table(headers, rows))
        else:
            click.echo(empty_note, err=True)


def _with_prompted_password(settings: ConnectionSettings) -> ConnectionSettings:
    if not sys.stdin.isatty():
        raise UsageProblem(
            f"no password for user {settings.user!r}: give --password, EJCLOUD_PASSWORD or "
            "password in the config file"
        )
    password: str = click.prompt(
        f"password for {settings.user}", hide_input=True, err=True, default="", show_default=False
    )
    sources = {**settings.sources, "password": "prompt"}
    return ConnectionSettings(
        settings.servers,
        settings.user,
        password,
        settings.timeout_s,
        sources,
        settings.cacert,
        settings.token,
    )


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(State).json_output = True


def json_option(func: F) -> F:
    """`--json` on a subcommand (the same as the global `ejcloud --json`)."""
    option = click.option(
        "--json",
        "json_flag",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_json,
        help="Print JSON for scripts instead of text.",
    )
    return option(func)


def confirm(question: str, yes: bool) -> None:
    """Ask `question` on an interactive terminal unless `yes`; CliError (exit code 1) on no.

    Without a terminal (a script) the command goes ahead, as `--yes` would.
    """
    if yes or not sys.stdin.isatty():
        return
    if not click.confirm(question, default=False, err=True):
        raise CliError("cancelled; nothing was changed")


def segment(name: str) -> str:
    """`name` quoted as one URL path segment."""
    return quote(name, safe="")


def spec_options(
    what: str, fields: Sequence[Callable[[F], F]]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of `add`/`update` for an app or a job: `-f FILE`, one flag per common field
    (`fields`, in help order), `--set FIELD=VALUE` for any other field, and `--json`."""
    options: list[Callable[[Any], Any]] = [
        click.option(
            "-f", "--file", "spec_file", help=f"JSON or YAML file with the {what} (-: stdin)."
        ),
        *fields,
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="FIELD=VALUE",
            help="Any other field (VALUE is JSON, or a string).",
        ),
        json_option,
    ]

    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return apply
