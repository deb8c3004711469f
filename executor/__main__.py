"""`python -m executor` / `ejcloud-executor`: the app executor an app's `bootstrapScript` starts.

It must be started by a Mesos agent (MESOS_AGENT_ENDPOINT, MESOS_FRAMEWORK_ID and
MESOS_EXECUTOR_ID set), in the sandbox where the agent unpacked the app's archive. It runs
until the agent shuts it down, the scheduler sends the framework message `STOP`, or it gets
SIGTERM/SIGINT; each of these stops every task first and exits 0. Exit 1: the connection to
the agent failed for good; 2: bad options or environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from .supervisor import ExecutorSettings, TaskSupervisor

log = logging.getLogger("executor")

_REQUIRED_ENV = ("MESOS_AGENT_ENDPOINT", "MESOS_FRAMEWORK_ID", "MESOS_EXECUTOR_ID")
_EXIT_POLL_S = 0.2
_STOP_TIMEOUT_S = 30.0
_DEFAULT_RECOVERY_TIMEOUT_S = 15 * 60.0  # Mesos's default MESOS_RECOVERY_TIMEOUT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m executor",
        description="The ejcloud Mesos executor: runs an app's jobs on this agent.",
    )
    parser.add_argument(
        "--app-dir",
        default=None,
        help="the app's directory (default: $EJC_APP_DIR, $MESOS_SANDBOX, $MESOS_DIRECTORY, cwd)",
    )
    parser.add_argument(
        "--kill-grace-seconds",
        type=float,
        default=None,
        help="SIGTERM-to-SIGKILL grace for killed tasks (default: $EJC_KILL_GRACE_SECONDS or 3)",
    )
    parser.add_argument(
        "--log-level", default=os.environ.get("EJC_LOG_LEVEL", "INFO"), help="default INFO"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s",
    )
    # One line per daemon fire from APScheduler's executor is noise next to ours.
    logging.getLogger("apscheduler.executors").setLevel(logging.WARNING)
    missing = [name for name in _REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        print(
            f"executor: {', '.join(missing)} not set: this program is started by a Mesos agent",
            file=sys.stderr,
        )
        return 2
    try:
        settings = ExecutorSettings.from_environment(
            os.environ, app_dir=args.app_dir, kill_grace_s=args.kill_grace_seconds
        )
    except ValueError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 2
    try:
        from pymesos import MesosExecutorDriver
        from pymesos.utils import parse_duration

        from .mesos import DriverReporter, MesosExecutor
    except ImportError as exc:
        print(
            f"executor: cannot import pymesos ({exc}); install pymesos 0.3.15 for {sys.executable}"
            " or point EJC_PYTHON at an interpreter that has it",
            file=sys.stderr,
        )
        return 2

    reporter = DriverReporter()
    supervisor = TaskSupervisor(settings, reporter)
    # pymesos retries an unreachable agent for a day by default; give up after the agent's
    # recovery timeout instead (exit 1), as a Mesos executor would.
    try:
        connect_timeout_s = float(parse_duration(os.environ.get("MESOS_RECOVERY_TIMEOUT", "")))
    except (AssertionError, TypeError, ValueError):  # pymesos asserts on a bad duration
        connect_timeout_s = _DEFAULT_RECOVERY_TIMEOUT_S
    driver = MesosExecutorDriver(
        MesosExecutor(supervisor), use_addict=False, timeout=connect_timeout_s
    )
    reporter.attach(driver)

    signalled: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only note it: the main loop below acts (Event.set in a handler can deadlock).
        signalled.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    log.info(
        "executor %s: starting for app dir %s (python %s, executor package %s)",
        os.environ["MESOS_EXECUTOR_ID"],
        settings.app_dir,
        settings.python,
        Path(__file__).resolve().parent,
    )
    supervisor.start()
    driver.start()
    code = 0
    try:
        while not supervisor.exit_requested.wait(_EXIT_POLL_S):
            if signalled:
                log.info("executor: got signal %d, stopping", signalled[0])
                break
            if driver.aborted:
                log.info("executor: the driver stopped")
                break
    except KeyboardInterrupt:
        log.info("executor: interrupted, stopping")
    except Exception:  # pymesos re-raises its IO thread's error in the main thread
        log.exception("executor: the connection to the agent failed")
        code = 1
    finally:
        # Stop order: tasks first (their TASK_KILLED still goes out), then the driver.
        if not supervisor.stop(_STOP_TIMEOUT_S):
            log.error("executor: some tasks did not stop in %.0fs", _STOP_TIMEOUT_S)
        reporter.close()
        driver.stop()
        driver.join()
    log.info("executor: exiting with %d", code)
    return code


if __name__ == "__main__":
    sys.exit(main())
