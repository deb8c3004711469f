"""Is this process, or this process group, alive? One answer for every test, read from /proc.

A zombie counts as dead: it has exited and holds nothing but its exit status until its parent
reaps it. Whether a test sees it before the reaping is a race, and an orphan's zombie may stay
for good where the machine's init does not reap (as in some containers). `os.kill(pid, 0)`
succeeds on a zombie, so it is not the test of life here; `pid_reaped` asks the other question,
whether even the zombie is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.support.waiting import wait_for

_PROC = Path("/proc")


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None if the
    process is gone. The name is in parentheses and may itself hold ')' or spaces, so the
    split is at the last ')'."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone (or going) meanwhile
        return None
    return stat.rpartition(")")[2].split()


def pid_alive(pid: int) -> bool:
    """True if process `pid` exists and has not exited (a zombie is dead)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def live_pids() -> Iterator[int]:
    """Every process on the machine that is alive in the sense of `pid_alive`."""
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and pid_alive(int(entry.name)):
            yield int(entry.name)


def group_alive(pgid: int) -> bool:
    """True if any process of group `pgid` is alive (its leader may be gone)."""
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def pid_reaped(pid: int) -> bool:
    """True if no process holds `pid` any more, not even a zombie: it exited and its parent
    collected its exit status. Stricter than `not pid_alive(pid)`, for processes whose parent is
    known to wait for them (a test's own children, a stand-in's executors): it also says that
    the parent did."""
    return not (_PROC / str(pid)).exists()


def wait_reaped(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until `pid_reaped(pid)`; AssertionError after `timeout_s`."""
    wait_for(lambda: pid_reaped(pid), timeout_s, message=f"pid {pid} to exit and be reaped")


__all__ = ["group_alive", "live_pids", "pid_alive", "pid_reaped", "wait_reaped"]
