"""SIMPLE jobs for the executor tests; each writes its markers under ctx.job_parameter."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any


def _out(ctx: Any, suffix: str) -> Path:
    return Path(ctx.job_parameter) / f"{ctx.job_name}-{ctx.sharding_item}.{suffix}"


def ok(ctx: Any) -> None:
    """Write the context it was given."""
    doc = ctx.to_dict()
    doc["cwd"] = os.getcwd()
    _out(ctx, "json").write_text(json.dumps(doc))
    print(f"ok {ctx.job_name} {ctx.sharding_item}", flush=True)


def fail(ctx: Any) -> None:
    raise ValueError(f"bad shard {ctx.sharding_item}")


def hang(ctx: Any) -> None:
    """Write the pid, then block until stopped; a SIGTERM leaves a `.stopped` marker."""
    _out(ctx, "pid").write_text(str(os.getpid()))
    try:
        threading.Event().wait()
    finally:
        _out(ctx, "stopped").write_text("finally ran")


def stubborn(ctx: Any) -> None:
    """Ignore SIGTERM and block: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _out(ctx, "pid").write_text(str(os.getpid()))
    threading.Event().wait()


def exit_hard(ctx: Any) -> None:
    """Die without a word (as a segfault would)."""
    os._exit(7)


def count(ctx: Any) -> None:
    """Append one line per run (daemon tests)."""
    with _out(ctx, "runs").open("a") as runs:
        runs.write(f"{os.getpid()}\n")


def count_then_fail_every_second_run(ctx: Any) -> None:
    path = _out(ctx, "runs")
    with path.open("a") as runs:
        runs.write(f"{os.getpid()}\n")
    if len(path.read_text().splitlines()) % 2 == 0:
        raise RuntimeError("even run fails")


class Greeter:
    """A class with execute(ctx)."""

    def execute(self, ctx: Any) -> None:
        _out(ctx, "greeted").write_text(ctx.sharding_parameter)


class NoExecute:
    pass


NOT_CALLABLE = 42
