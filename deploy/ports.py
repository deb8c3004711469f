"""Which loopback TCP ports are taken, and by which process (best effort, from /proc)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["describe_holder", "holders", "port_free"]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could bind `host:port` now.

    Binds the way our servers do (SO_REUSEADDR, so connections of an earlier run still in
    TIME_WAIT do not count); anything listening on the port, on this address or a wildcard one,
    makes it taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _socket_inodes(port: int) -> list[str]:
    """Inodes of the sockets bound to local `port`, listening ones first."""
    listening: list[str] = []
    other: list[str] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port != port or fields[9] == "0":
                continue
            (listening if fields[3] == _LISTEN else other).append(fields[9])
    return listening + other


def holders(port: int) -> list[tuple[int, str]]:
    """(pid, command line) of each process with a socket on local `port`, listeners first.

    Only processes whose file descriptors this user may read are found; empty when none is.
    """
    wanted = {f"socket:[{inode}]": i for i, inode in enumerate(_socket_inodes(port))}
    if not wanted:
        return []
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(entry / "fd" / fd)
            except OSError:
                continue
            rank = wanted.get(target)
            if rank is not None:
                found[pid] = (rank, _command_line(entry))
                break
    return [(pid, cmd) for pid, (_, cmd) in sorted(found.items(), key=lambda kv: kv[1][0])]


def _command_line(proc_dir: Path) -> str:
    try:
        raw = (proc_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return text if len(text) <= 160 else text[:157] + "..."


def describe_holder(port: int) -> str:
    """`pid 1234 (cmd ...)`, naming each process found on `port`, or a note that none was."""
    found = holders(port)
    if not found:
        return "a process this user cannot see"
    return ", ".join(f"pid {pid} ({cmd})" for pid, cmd in found)
