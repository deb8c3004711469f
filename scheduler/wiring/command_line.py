"""The replica's command line: `python -m scheduler [--config FILE] [--KEY VALUE ...]`.

Reads the properties file that `--config` names and the process environment, and hands them
with the flags to `load_settings`, which merges and checks them (defaults < file < environment
< flags).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

from scheduler.edge.http import http_edge
from scheduler.model.errors import SettingsError
from scheduler.model.settings import (
    ENV_PREFIX,
    KEYS_BY_NAME,
    Settings,
    load_settings,
    read_properties,
)


def _flag_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler",
        description="Elastic-Job-Cloud compatible HA scheduler replica. Settings come from "
        "defaults, then --config FILE, then environment variables of the same name "
        f"(or {ENV_PREFIX}NAME), then these flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="properties file (key=value lines)")
    for spec in KEYS_BY_NAME.values():
        shown = "***" if spec.secret and spec.default else repr(spec.default)
        parser.add_argument(
            f"--{spec.name}",
            metavar="VALUE",
            dest=spec.name,
            default=None,
            help=f"{spec.help} (default: {shown})",
        )
    return parser


def settings_from_argv(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Settings:
    """Build Settings for `python -m scheduler ARGV`.

    Raises SettingsError for invalid values or an unreadable config file; argparse itself exits
    with status 2 for unknown flags.
    """
    args = _flag_parser().parse_args(list(argv))
    flags = {
        spec.name: getattr(args, spec.name)
        for spec in KEYS_BY_NAME.values()
        if getattr(args, spec.name) is not None
    }
    file_values: dict[str, str] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as fh:
                file_values = read_properties(fh.read())
        except OSError as exc:
            raise SettingsError({"--config": f"cannot read {args.config}: {exc.strerror}"}) from exc
    settings = load_settings(file_values, os.environ if environ is None else environ, flags)
    # The TLS certificate and key are read now: a bad pair is a settings error (exit 2), not
    # a failure of a replica half started.
    http_edge(settings)
    return settings
