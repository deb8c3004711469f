"""`python -m deploy.localmesos` (from a checkout): run the stand-in until SIGTERM.

Prints `localmesos listening on 127.0.0.1:PORT` to stdout once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from .cluster import DEFAULT_RESOURCES, LocalMesos
from .fetcher import DEFAULT_MAX_EXTRACTED_BYTES
from .resources import ResourceError, Resources
from .zk import ZkAnnouncer

log = logging.getLogger("deploy.localmesos")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localmesos", description="A local Mesos master and agents for tests and demos."
    )
    parser.add_argument("--port", type=int, default=5050, help="master port (0: any free port)")
    parser.add_argument("--agents", type=int, default=1, help="number of agents")
    parser.add_argument("--resources", default=DEFAULT_RESOURCES, help="each agent's resources")
    parser.add_argument(
        "--work-dir",
        default=None,
        help="sandboxes and fetch caches (default: a temporary directory, removed on exit)",
    )
    parser.add_argument("--zk", default=None, help="zk://host:port/path to announce the master")
    parser.add_argument(
        "--credentials",
        action="append",
        default=[],
        metavar="PRINCIPAL:SECRET",
        help="require HTTP Basic auth on the scheduler API (repeatable)",
    )
    parser.add_argument("--allocation-interval-seconds", type=float, default=1.0)
    parser.add_argument("--heartbeat-interval-seconds", type=float, default=15.0)
    parser.add_argument("--executor-registration-timeout-seconds", type=float, default=60.0)
    parser.add_argument("--executor-shutdown-grace-period-seconds", type=float, default=5.0)
    parser.add_argument(
        "--executor-environment-variables",
        default="{}",
        metavar="JSON",
        help="a JSON object of strings: the environment executors and command tasks get besides "
        "the MESOS_* variables and their own (as Mesos's --executor_environment_variables); "
        "nothing of this process's environment is passed on",
    )
    parser.add_argument(
        "--max-extracted-bytes",
        type=int,
        default=DEFAULT_MAX_EXTRACTED_BYTES,
        help="the most an archive the fetcher extracts may unpack to (default 1 GiB); over it "
        "the launch fails",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s",
    )
    credentials: dict[str, str] = {}
    for item in args.credentials:
        principal, sep, secret = item.partition(":")
        if not sep or not principal or not secret:
            print(f"--credentials wants principal:secret, got {item!r}", file=sys.stderr)
            return 2
        credentials[principal] = secret
    try:
        resources = Resources.parse_spec(args.resources)
    except ResourceError as exc:
        print(f"--resources: {exc}", file=sys.stderr)
        return 2
    if args.agents < 0:
        print("--agents must be >= 0", file=sys.stderr)
        return 2
    if args.max_extracted_bytes <= 0:
        print("--max-extracted-bytes must be > 0", file=sys.stderr)
        return 2
    try:
        environment = json.loads(args.executor_environment_variables)
    except ValueError as exc:
        print(f"--executor-environment-variables: not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(environment, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in environment.items()
    ):
        print(
            "--executor-environment-variables wants a JSON object of names to strings",
            file=sys.stderr,
        )
        return 2

    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("localmesos: got signal %d, stopping", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    mesos = LocalMesos(
        port=args.port,
        agents=args.agents,
        resources=resources,
        work_dir=args.work_dir,
        credentials=credentials,
        allocation_interval_s=args.allocation_interval_seconds,
        heartbeat_interval_s=args.heartbeat_interval_seconds,
        executor_registration_timeout_s=args.executor_registration_timeout_seconds,
        executor_shutdown_grace_period_s=args.executor_shutdown_grace_period_seconds,
        executor_environment=environment,
        max_extracted_bytes=args.max_extracted_bytes,
    )
    announcer = ZkAnnouncer(args.zk, mesos.master.master_info()) if args.zk else None
    if announcer is not None:
        mesos.master_listeners.append(announcer.reannounce)
    mesos.start()
    try:
        if announcer is not None:
            announcer.start()
        print(f"localmesos listening on {mesos.address}", flush=True)
        while not stop_requested.wait(1.0):
            pass
    finally:
        # Leave ZooKeeper first so no framework finds a master that is going away.
        if announcer is not None:
            announcer.stop()
        mesos.stop(timeout_s=15.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
