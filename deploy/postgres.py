"""Run a real PostgreSQL server (Debian's `postgresql` package) as a child process.

Used by the test suite and the benchmarks: one server on a free loopback port, with its cluster,
unix socket and log in a directory of the caller's, and trust authentication for the `postgres`
role. PostgreSQL refuses to run as root, so as root initdb and postgres run as Debian's
`postgres` system user. The server runs in a process group of its own (the postmaster and its
backends, signalled together) and dies with the thread that started it (`deploy.children`).
"""

from __future__ import annotations

import atexit
import logging
import os
import pwd
import signal
import stat
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow
from sqlalchemy import URL

from deploy import children
from deploy.zookeeper import free_port

__all__ = ["SUPERUSER", "PostgresServer", "PostgresUnavailable", "find_bin_dir"]

log = logging.getLogger(__name__)

SUPERUSER = "postgres"  # the role initdb creates (`-U`); trust authentication, no password
_INSTALL_ROOT = Path("/usr/lib/postgresql")
_SYSTEM_USER = "postgres"  # Debian's account for the server, used when we are root
_CONNECT_TIMEOUT_S = 2  # libpq rounds anything smaller up to 2 s
_INITDB_TIMEOUT_S = 120.0


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is not installed, or a server did not come up."""


def find_bin_dir() -> Path:
    """The newest `/usr/lib/postgresql/<version>/bin` that holds initdb and postgres.

    Raises PostgresUnavailable naming the package to install when there is none.
    """
    found: list[tuple[tuple[int, ...], Path]] = []
    for bin_dir in _INSTALL_ROOT.glob("*/bin"):
        if not ((bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file()):
            continue
        try:
            version = tuple(int(part) for part in bin_dir.parent.name.split("."))
        except ValueError:
            continue
        found.append((version, bin_dir))
    if not found:
        raise PostgresUnavailable(
            f"no initdb and postgres in {_INSTALL_ROOT}/*/bin: install the Debian postgresql "
            "package (./dev.sh setup does)"
        )
    return max(found)[1]


def _system_account() -> pwd.struct_passwd | None:
    """The account to run PostgreSQL as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(_SYSTEM_USER)
    except KeyError:
        raise PostgresUnavailable(
            f"PostgreSQL refuses to run as root and there is no {_SYSTEM_USER!r} user to run it "
            "as: install the Debian postgresql package (./dev.sh setup does)"
        ) from None


def _can_search(path: Path, account: pwd.struct_passwd, groups: set[int]) -> bool:
    info = path.stat()
    if info.st_uid == account.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _hand_over(base_dir: Path, account: pwd.struct_passwd) -> None:
    """Give `account` `base_dir` and a way to reach it.

    Root's temporary folders (pytest's /tmp/pytest-of-root, tempfile.mkdtemp) are mode 0700, and
    the server must reach its data directory by path, so each ancestor that `account` cannot
    search gets o+x (search only, no listing). pytest tightens its own root again at the start
    of each session.
    """
    groups = set(os.getgrouplist(account.pw_name, account.pw_gid))
    for ancestor in reversed(base_dir.parents):
        if not _can_search(ancestor, account, groups):
            mode = stat.S_IMODE(ancestor.stat().st_mode)
            os.chmod(ancestor, mode | stat.S_IXOTH)
            log.warning(
                "postgres: made %s searchable by others (o+x) so that user %s can reach %s",
                ancestor,
                account.pw_name,
                base_dir,
            )
    os.chown(base_dir, account.pw_uid, account.pw_gid)


class PostgresServer:
    """One PostgreSQL server (postmaster) with its cluster in `base_dir/data`.

    The cluster is created on the first `start()` and kept: `stop()` then `start()` brings the
    same data back on the same port, so a test can take the database away and return it.
    `pause()` freezes the server instead, so that connections hang rather than fail. Not
    thread-safe: one owner starts and stops it. Servers still running when the interpreter exits
    are stopped then.
    """

    def __init__(self, base_dir: Path, port: int | None = None) -> None:
        self.base_dir = base_dir.resolve()
        self.port = port if port is not None else free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "postgres.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs; its backends are in the process group `pid`."""
        return self._proc.pid if self.running and self._proc is not None else None

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of `database` on this server (psycopg 3 driver)."""
        url = URL.create(
            "postgresql+psycopg",
            username=SUPERUSER,
            host="127.0.0.1",
            port=self.port,
            database=database,
        )
        return url.render_as_string(hide_password=False)

    def start(self, timeout_s: float = 60.0) -> None:
        """Create the cluster if there is none, start the server, block until it accepts
        connections. Does nothing when it is running.

        Raises PostgresUnavailable when PostgreSQL is not installed, initdb fails, or the server
        exits or does not accept connections within `timeout_s`; the message ends with its log,
        and no process is left running.
        """
        if self.running:
            return
        bin_dir = find_bin_dir()
        account = _system_account()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if account is not None:
            _hand_over(self.base_dir, account)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bin_dir, account)
        command = [
            str(bin_dir / "postgres"),
            *("-D", str(self.data_dir)),
            *("-c", f"port={self.port}"),
            *("-c", "listen_addresses=127.0.0.1"),
            *("-c", f"unix_socket_directories={self.base_dir}"),
            # A test database: losing it in a machine crash costs nothing, syncing costs time.
            *("-c", "fsync=off"),
            *("-c", "full_page_writes=off"),
            *("-c", "shared_buffers=32MB"),
            *("-c", "logging_collector=off"),
        ]
        with open(self.log_path, "ab") as logfile:
            self._proc = children.start(
                command,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.base_dir,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
                extra_groups=[] if account else None,
            )
        self._paused = False
        _running.add(self)
        log.info("postgres %s: started pid %s in %s", self.address, self._proc.pid, self.base_dir)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _initdb(self, bin_dir: Path, account: pwd.struct_passwd | None) -> None:
        command = [
            str(bin_dir / "initdb"),
            *("-D", str(self.data_dir)),
            *("-U", SUPERUSER),
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        with open(self.log_path, "ab") as logfile:
            try:
                result = subprocess.run(
                    command,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.base_dir,
                    user=account.pw_uid if account else None,
                    group=account.pw_gid if account else None,
                    extra_groups=[] if account else None,
                    timeout=_INITDB_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise PostgresUnavailable(
                    f"initdb {self.data_dir} did not finish in {_INITDB_TIMEOUT_S}s:\n"
                    f"{self.log_tail()}"
                ) from None
        if result.returncode != 0:
            raise PostgresUnavailable(
                f"initdb {self.data_dir} exited with {result.returncode}:\n{self.log_tail()}"
            )
        log.info("postgres: created cluster %s", self.data_dir)

    def _wait_ready(self, timeout_s: float) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + timeout_s
        last_error = "not tried"
        while True:
            if proc.poll() is not None:
                raise PostgresUnavailable(
                    f"postgres {self.address} exited with {proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with self._connect("postgres") as connection:
                    row = connection.execute("SELECT current_setting('data_directory')").fetchone()
            except psycopg.OperationalError as exc:
                last_error = str(exc).strip()
            else:
                # Another server may hold the port; ours then exits, failing to bind it.
                served = Path(row[0]) if row else None
                if served == self.data_dir:
                    return
                last_error = f"port {self.port} is served by another server, data in {served}"
            if time.monotonic() >= deadline:
                raise PostgresUnavailable(
                    f"postgres {self.address} not accepting connections after {timeout_s}s "
                    f"({last_error}):\n{self.log_tail()}"
                )
            try:
                proc.wait(0.05)  # returns at once if it exits
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and wait for it: fast shutdown (SIGINT: backends are disconnected,
        the data is checkpointed), SIGKILL to its process group after `timeout_s`.

        Blocks. The cluster stays; `start()` brings it back on the same port.
        """
        proc, self._proc = self._proc, None
        _running.discard(self)
        paused, self._paused = self._paused, False
        if proc is None:
            return
        if children.exited(proc):
            # It died on its own (killed by a test, say): its backends may outlive it briefly.
            children.stop(proc, timeout_s=0)
            log.warning("postgres %s: had exited with %s", self.address, proc.returncode)
            return
        if paused:
            children.signal_group(proc, signal.SIGCONT)
        children.stop(proc, signal.SIGINT, timeout_s)
        log.info("postgres %s: stopped", self.address)

    def pause(self) -> None:
        """Freeze the server and its backends (SIGSTOP to its process group).

        Connections then hang until their own timeouts, as with a database host that stops
        answering; `resume()` thaws it. Raises PostgresUnavailable when it is not running.
        """
        os.killpg(self._require_pid(), signal.SIGSTOP)
        self._paused = True
        log.info("postgres %s: paused", self.address)

    def resume(self) -> None:
        """Thaw a server that `pause()` froze."""
        os.killpg(self._require_pid(), signal.SIGCONT)
        self._paused = False
        log.info("postgres %s: resumed", self.address)

    def _require_pid(self) -> int:
        pid = self.pid
        if pid is None:
            raise PostgresUnavailable(f"postgres {self.address} is not running")
        return pid

    def create_database(self, name: str) -> str:
        """Create the database `name` and return its SQLAlchemy URL.

        Raises psycopg.errors.DuplicateDatabase when it exists, psycopg.OperationalError when
        the server is down.
        """
        with self._connect("postgres", autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop the database `name` if it exists, disconnecting any session still in it."""
        with self._connect("postgres", autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def _connect(self, database: str, autocommit: bool = False) -> psycopg.Connection[TupleRow]:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=SUPERUSER,
            dbname=database,
            connect_timeout=_CONNECT_TIMEOUT_S,
            autocommit=autocommit,
        )

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


_running: set[PostgresServer] = set()


@atexit.register
def _stop_running() -> None:
    """Never leave a server behind an interpreter that exits without stopping it."""
    for server in list(_running):
        server.stop()
