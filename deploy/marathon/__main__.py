"""Command line: build the artifact, render the app, create or update it in Marathon, report."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.marathon.artifact import PROJECT_ROOT, build_artifact
from deploy.marathon.client import MarathonClient
from deploy.marathon.deployer import Deployer
from deploy.marathon.errors import DeployError, InvalidOptions
from deploy.marathon.template import AppSpec, render

_PROG = "python -m deploy.marathon"
_DEFAULT_OUT = PROJECT_ROOT / "build" / "ejcloud-scheduler.tar.gz"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_PROG,
        description="Run the scheduler as a Marathon app: build the artifact, create or update "
        "the app, wait for the deployment and report the instances and the leader.",
    )
    p.add_argument("--marathon", required=True, help="Marathon URL, e.g. http://marathon:8080")
    p.add_argument("--zk", required=True, help="ZooKeeper ensemble (zk_servers), host:port,...")
    p.add_argument(
        "--mesos", required=True, help="Mesos master (mesos_url), e.g. zk://zk:2181/mesos"
    )
    p.add_argument("--instances", type=int, default=2, help="replicas, at least 2 (default 2)")
    p.add_argument("--cpus", type=float, default=0.5, help="cpus per instance (default 0.5)")
    p.add_argument("--mem", type=float, default=512.0, help="memory MB per instance (default 512)")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--artifact-url",
        help="URI the agents fetch a prebuilt artifact from (nothing is built); build one with "
        "python -m deploy.marathon.artifact OUT.tar.gz",
    )
    source.add_argument(
        "--artifact-out",
        type=Path,
        help=f"build the artifact here and let agents fetch it as file://PATH, so PATH must be "
        f"visible on every agent (default {_DEFAULT_OUT})",
    )
    p.add_argument("--app-id", default="/ejcloud-scheduler", help="Marathon app id")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another setting or variable for every instance (repeatable), e.g. zk_namespace=ejc",
    )
    p.add_argument("--image", help="run in this Docker image with the Mesos containerizer")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (default 600)")
    p.add_argument("--poll-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help="print the app JSON, change nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="log each step")
    return p


def _env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidOptions(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def run(args: argparse.Namespace) -> int:
    """Do what `args` ask; raises DeployError on any failure the user must fix."""
    out: Path = args.artifact_out or _DEFAULT_OUT
    artifact_url: str = args.artifact_url or out.resolve().as_uri()
    spec = AppSpec(
        zk_servers=args.zk,
        mesos_url=args.mesos,
        artifact_url=artifact_url,
        app_id=args.app_id,
        instances=args.instances,
        cpus=args.cpus,
        mem_mb=args.mem,
        env=_env(args.env),
        image=args.image,
    )
    app = render(spec)
    if args.dry_run:
        print(json.dumps(app, indent=2))
        return 0
    if not args.artifact_url:
        try:
            print(f"artifact {build_artifact(out)}")
        except OSError as exc:
            raise DeployError(f"cannot build the artifact at {out}: {exc}") from exc
    deployer = Deployer(
        MarathonClient(args.marathon),
        timeout_s=args.timeout,
        poll_interval_s=args.poll_interval,
    )
    done = deployer.deploy(app)
    print(f"deployed {done.app_id} (deployment {done.deployment_id or 'none needed'})")
    for instance in done.instances:
        print(f"instance {instance.address} {instance.role}")
    print(f"leader {done.leader}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run(args)
    except DeployError as exc:
        print(f"{_PROG}: error: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
