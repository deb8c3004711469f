"""Entry point of the `ejcloud` console script and of `python -m ejcloud_cli`."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import click

from ejcloud_cli.cli import cli
from ejcloud_cli.context import State
from ejcloud_cli.errors import EXIT_ERROR, ApiError, CliError
from ejcloud_cli.output import clean

# What a shell reports for a command stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
_AUTH_HINT = (
    "give credentials with --user/--password, EJCLOUD_USER/EJCLOUD_PASSWORD, "
    "an API token in EJCLOUD_TOKEN, or user/password (or token) in the config file"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code; failures print a message, never a traceback
    (set EJCLOUD_DEBUG=1 to see one for an unexpected error)."""
    state = State()
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="ejcloud",
            standalone_mode=False,
            obj=state,
        )
    except CliError as exc:
        _report(exc, state)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("\nejcloud: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`ejcloud job list | head`): stop quietly, and keep Python from
        # complaining while it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get("EJCLOUD_DEBUG"):
            raise
        click.echo(f"ejcloud: unexpected error: {clean(repr(exc))}", err=True)
        return EXIT_ERROR
    return result if isinstance(result, int) else 0


def _report(exc: CliError, state: State) -> None:
    if state.json_output:
        click.echo(json.dumps(exc.to_json()), err=True)
        return
    click.echo(f"ejcloud: error: {clean(exc.message)}", err=True)
    for line in exc.details():
        click.echo(f"  {clean(line)}", err=True)
    if isinstance(exc, ApiError) and exc.status == 401 and not state.has_user():
        click.echo(f"  hint: {_AUTH_HINT}", err=True)


if __name__ == "__main__":
    sys.exit(main())
