"""The live view of `./dev.sh run`: one short line per event, read from the processes' logs.

Each followed log is read from where it stood when the cluster started it, so the view shows
this run's events only, and only whole lines. Replica logs give leadership, task ends,
failures, timeouts, failovers, fires that queued no run (skipped, capped, delayed, excluded),
replicas joining and job changes; the Mesos stand-in's log gives launches, one line per
ACCEPT, so that a launch round shows as one event naming its jobs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FollowedLog", "render_line"]

# `2024-05-01 12:00:03,123 INFO [thread] logger: message`, as the replicas and the stand-in log.
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)[,.]\d+) (\w+) \[[^\]]*\] [\w.]+: (.*)$")
_TASK = r"(\S+?)@-@(\d+)@-@\S+"  # a task id: job, shard, the rest

Shape = Callable[[re.Match[str]], str]


def _task_state(m: re.Match[str]) -> str:
    job, shard, state, message = m.group(1), m.group(2), m.group(3), m.group(5).strip()
    return f"{state} {job} shard {shard}" + (f": {message}" if message else "")


def _finished(tasks: str) -> str:
    shards = []
    for each in tasks.split(", "):
        task = re.match(_TASK, each.removesuffix(" finished"))
        shards.append(f"{task[1]} shard {task[2]}" if task else each)
    return "finished " + ", ".join(shards)


_REPLICA: tuple[tuple[re.Pattern[str], Shape], ...] = (
    (re.compile(r"^leader: (\S+) won term (\d+)"), lambda m: f"leader {m[1]} (term {m[2]})"),
    (re.compile(r"^leader: term (\d+) ended \((.*)\)"), lambda m: f"term {m[1]} ended: {m[2]}"),
    # The tasks a batch of status updates ended well: `status: <task> finished, <task> ...`.
    (re.compile(r"^status: (\S+ finished(?:, \S+ finished)*)$"), lambda m: _finished(m[1])),
    (re.compile(rf"^status: {_TASK} killed$"), lambda m: f"killed {m[1]} shard {m[2]}"),
    (re.compile(rf"^status: {_TASK} (TASK_\w+) \((\w*)\)(.*)$"), _task_state),
    (
        re.compile(r"^status: daemon run of (\S+) shard (\d+) failed: (.*)"),
        lambda m: f"run failed: {m[1]} shard {m[2]}: {m[3]}",
    ),
    (
        re.compile(r"^status: shard (\d+) of (\S+) queued for failover"),
        lambda m: f"failover queued: {m[2]} shard {m[1]}",
    ),
    (
        re.compile(r"^state: shard (\d+) of (\S+) (failed \d+ times in a row; relaunch in .*)"),
        lambda m: f"{m[2]} shard {m[1]} {m[3]}",
    ),
    (re.compile(r"^producer: job (\S+) (missed its fire.*)"), lambda m: f"{m[1]} {m[2]}"),
    # A run stopped at its timeoutSeconds (`status: <task> timed out after N s (<state>)`).
    (
        re.compile(rf"^status: {_TASK} (timed out(?: after \d+ s)?)"),
        lambda m: f"{m[3]}: {m[1]} shard {m[2]}",
    ),
    # Fires that queued no run: skipped, capped, excluded by a calendar (a line per job and
    # outcome at most every 10 s, `producer: job <job>: fire at <time> skipped: <why>` or
    # `<n> fires from ...`, with `(and <n> skipped fires since the last line)` after the first).
    (
        re.compile(r"^producer: job (\S+): ((?:fire at|\d+ fires from) .*)"),
        lambda m: f"{m[1]}: {m[2]}",
    ),
    (
        re.compile(r"^producer: (\d+ fire\(s\) delayed over max_fires_per_second=\S+)"),
        lambda m: m[1],
    ),
    # A replica that joined (or rejoined) the cluster, as each replica sees it, and one that
    # cannot be trusted.
    (
        re.compile(r"^vouching: replica (\S+) proved it belongs to this cluster"),
        lambda m: f"replica {m[1]} joined",
    ),
    (
        re.compile(r"^vouching: election member '([^']*)' is not vouched for: (.*?); it gets"),
        lambda m: f"election member {m[1]} NOT vouched for: {m[2]}",
    ),
    (re.compile(r"^api: job (\S+) registered"), lambda m: f"registered {m[1]}"),
    (re.compile(r"^config-listener: job (\S+) changed"), lambda m: f"updated {m[1]}"),
    (re.compile(r"^config-listener: job (\S+) disabled"), lambda m: f"disabled {m[1]}"),
    (re.compile(r"^config-listener: job (\S+) enabled"), lambda m: f"enabled {m[1]}"),
    (re.compile(r"^config-listener: job (\S+) deleted"), lambda m: f"deleted {m[1]}"),
    (re.compile(r"^api: job (\S+) triggered"), lambda m: f"triggered {m[1]}"),
    (
        re.compile(r"^api: app (\S+) (registered|updated|disabled|enabled|deleted)"),
        lambda m: f"app {m[1]} {m[2]}",
    ),
)


def _launched(m: re.Match[str]) -> str:
    jobs = Counter(task_id.split("@-@", 1)[0] for task_id in m[3].split())
    what = ", ".join(f"{n} task{'s' if n != 1 else ''} of {job}" for job, n in jobs.items())
    return f"launched {what} on {m[2].removesuffix('.localmesos')}"


_MESOS: tuple[tuple[re.Pattern[str], Shape], ...] = (
    (re.compile(r"^framework \S+: launched (\d+) task\(s\) on (\S+): (.*)"), _launched),
    (
        re.compile(r"^executor (\S+): launch failed: (.*)"),
        lambda m: f"executor {m[1]} failed to start: {m[2]}",
    ),
)

_MAX_ERROR_CHARS = 200


def render_line(line: str, patterns: str) -> tuple[str, str] | None:
    """(time, text) to show for one log line of a replica (`patterns` "replica") or of the
    stand-in ("mesos"), or None when the line is not an event of the view.

    Replica lines at ERROR level that no pattern knows are shown as they are (shortened): they
    are what a human must look at.
    """
    parsed = _LINE.match(line)
    if parsed is None:
        return None
    _, stamp, level, message = parsed.groups()
    for pattern, shape in _REPLICA if patterns == "replica" else _MESOS:
        found = pattern.search(message)
        if found:
            return stamp, shape(found)
    if patterns == "replica" and level == "ERROR":
        short = message if len(message) <= _MAX_ERROR_CHARS else message[:197] + "..."
        return stamp, f"error: {short}"
    return None


@dataclass
class FollowedLog:
    """One log file the view follows, from `offset` on, under `label` ("127.0.0.1:8899")."""

    label: str
    path: Path
    patterns: str  # "replica" or "mesos"
    offset: int = 0

    @classmethod
    def from_now(cls, label: str, path: Path, patterns: str) -> FollowedLog:
        """Follow `path` from its current end (it may not exist yet)."""
        size = path.stat().st_size if path.exists() else 0
        return cls(label, path, patterns, size)

    def new_events(self) -> list[tuple[str, str, str]]:
        """(sort key, time, text) of each event in the whole lines written since the last call;
        the key is the line's full timestamp, to merge the events of several logs in order."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        events = []
        for line in data[:end].decode(errors="replace").splitlines():
            shown = render_line(line, self.patterns)
            if shown is not None:
                events.append((line[:23], *shown))
        return events
