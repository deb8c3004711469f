"""`python -m scheduler`: run one scheduler replica until SIGTERM/SIGINT
(`python -m scheduler hash-password` prints a password hash for the settings instead).

Exit codes: 0 after a clean stop, 1 when start-up fails (ZooKeeper unreachable, port taken),
2 for invalid settings (the message names the key), 3 when the replica failed in a way it cannot
recover from in-process (its ZooKeeper client could not be replaced within a session timeout, or
one of its threads died): its supervisor should start it again.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from scheduler.model.errors import SchedulerError, SettingsError
from scheduler.model.settings import Settings
from scheduler.wiring.command_line import settings_from_argv

log = logging.getLogger("scheduler")

LOG_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT, stream=sys.stderr)
    # kazoo logs every reconnect attempt at WARNING/INFO; waitress every client that disconnects
    # mid-request at INFO (an attack would flood the log).
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logging.getLogger("waitress").setLevel(logging.WARNING)


def _raise_fd_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit.

    The HTTP server derives its connection limit from the result and keeps it well below, so
    client connections can never take the descriptors ZooKeeper and Mesos need.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Some systems report an unlimited hard limit but refuse it as a soft one.
    for target in (hard, 65536) if hard == resource.RLIM_INFINITY else (hard,):
        if target == resource.RLIM_INFINITY or target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            log.info("scheduler: file-descriptor limit raised from %s to %s", soft, target)
            return


def _pymesos_thread_died() -> bool:
    import pymesos.process

    if getattr(pymesos.process, "_exc_info", None) is None:
        return False
    exc_info = pymesos.process._exc_info
    pymesos.process._exc_info = None
    os.write(2, f"scheduler: pymesos driver thread died: {exc_info[1]!r}\n".encode())
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hash-password"]:
        # `python -m scheduler hash-password`: a hash for `auth_*_password_hash`, read from
        # the terminal (or one line of stdin), printed on stdout; nothing else is written.
        from scheduler.api.auth import main as hash_password_main

        return hash_password_main(["hash", *args[1:]])
    try:
        settings = settings_from_argv(args)
    except SettingsError as exc:
        print(f"scheduler: {exc.message}", file=sys.stderr)
        return 2
    # The replica's parts are imported once the settings are known to be good: a bad setting
    # is reported after about 0.5 s of CPU instead of 1.4 (the API, the statistics' SQLAlchemy and
    # Alembic, the Mesos driver).
    from scheduler.leader.mesos.driver import DRIVER_CRASHED
    from scheduler.wiring.replica import build_replica
    from scheduler.wiring.term import build_components

    _configure_logging(settings)
    _raise_fd_limit()
    log.info("scheduler %s: settings %s", settings.identity, settings.redacted())

    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and _pymesos_thread_died():
            # pymesos reports a dead IO thread with a simulated SIGINT: reconnect, not exit.
            DRIVER_CRASHED.set()
            return
        if stop_requested.is_set():
            # Second signal: cold stop (RQ style). The session dies with the process.
            os.write(2, b"scheduler: second signal, exiting now\n")
            os._exit(1)
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    replica = build_replica(settings, build_components)
    try:
        replica.start()
    except (SchedulerError, OSError) as exc:
        log.error("scheduler %s: cannot start: %s", settings.identity, exc)
        return 1
    print(f"scheduler {settings.identity}: http://{settings.identity}/health", flush=True)
    # A short wait, not one long one: a signal the kernel delivers to another thread only
    # runs its Python handler when the main thread next wakes up.
    while not stop_requested.wait(0.2):
        if replica.failed.is_set():
            break
    if replica.failed.is_set() and not stop_requested.is_set():
        log.critical(
            "scheduler %s: exiting with status 3 for the supervisor to restart it: %s",
            settings.identity,
            replica.failure,
        )
        replica.stop(timeout_s=5.0)
        # A thread stuck for good (the reason the replica failed) must not keep the process up.
        logging.shutdown()
        os._exit(3)
    replica.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
