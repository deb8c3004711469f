"""Command line: build the artifact, render the app, create or update it in Marathon, report."""

from __future__ import annotations

import argparse
import json
import logging
import os
import ssl
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from marathon.artifact import PROJECT_ROOT, build_artifact
from marathon.client import MarathonClient
from marathon.credentials import ACCOUNTS, hash_problem, read_hash, setting_of
from marathon.deployer import Deployer, try_logins
from marathon.errors import DefinitionRejected, DeployError, InvalidOptions
from marathon.template import AppSpec, render

_PROG = "python -m marathon"
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
        "python -m marathon.artifact OUT.tar.gz",
    )
    source.add_argument(
        "--artifact-out",
        type=Path,
        help=f"build the artifact here and let agents fetch it as file://PATH, so PATH must be "
        f"visible on every agent (default {_DEFAULT_OUT})",
    )
    source.add_argument(
        "--container-image",
        metavar="IMAGE",
        help="the container form: run the scheduler's own image (./dev.sh image builds it; "
        "push it where the agents pull from) with the Docker containerizer on the agents' "
        "network; nothing is built or fetched",
    )
    p.add_argument("--app-id", default="/ejcloud-scheduler", help="Marathon app id")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another setting or variable for every instance (repeatable), e.g. zk_namespace=ejc",
    )
    p.add_argument(
        "--image",
        help="run the artifact in this Docker image (one with Python 3.11) with the Mesos "
        "containerizer",
    )
    for account in ACCOUNTS:
        p.add_argument(
            account.secret_option,
            metavar="SOURCE",
            help=f"where the cluster's secret store holds the {account.role} password hash "
            "(python -m scheduler.api.auth hash makes one); the app refers to it through "
            "Marathon's secrets field",
        )
        given = p.add_mutually_exclusive_group()
        given.add_argument(
            account.hash_option,
            metavar="HASH",
            help=f"the {account.role} password hash itself, to check it before deploying "
            f"(also ${account.environment_variable}); never put in the app's plain env "
            "unless --insecure",
        )
        given.add_argument(
            f"{account.hash_option}-file",
            type=Path,
            metavar="FILE",
            help=f"read {account.hash_option} from FILE (one line)",
        )
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="SETTING=SOURCE",
        help="another secret setting read from the secret store (repeatable), e.g. "
        "zk_digest=/ejcloud/zk_digest or framework_secret=/ejcloud/mesos_secret",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="deploy even with default passwords, secrets in the app's plain env, "
        "authentication off or an http:// artifact URL (warns about each)",
    )
    p.add_argument(
        "--insecure-zk",
        action="store_true",
        help="deploy without zk_digest (the replicas then run with require_zk_digest=false): "
        "anyone who reaches ZooKeeper can rewrite jobs (warns)",
    )
    p.add_argument(
        "--cacert",
        type=Path,
        metavar="FILE",
        help="when the replicas serve https (--env http_tls_cert_file=... or --secret "
        "http_tls_cert_file=...): the PEM CA certificate(s) their certificates are verified "
        "against while waiting for the leader (default: the system's trusted CAs)",
    )
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


def _secrets(args: argparse.Namespace) -> dict[str, str]:
    secrets: dict[str, str] = {}
    for pair in args.secret:
        setting, sep, source = pair.partition("=")
        if not sep or not setting:
            raise InvalidOptions(f"--secret {pair!r}: expected SETTING=SOURCE")
        secrets[setting] = source
    for account in ACCOUNTS:
        source = getattr(args, _dest(account.secret_option))
        if source is None:
            continue
        if secrets.get(account.setting, source) != source:
            raise InvalidOptions(
                f"{account.secret_option} and --secret {account.setting} name different sources"
            )
        secrets[account.setting] = source
    return secrets


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def _checked_hashes(
    args: argparse.Namespace,
    env: dict[str, str],
    secrets: Mapping[str, str],
    environ: Mapping[str, str],
) -> None:
    """Check each password hash given; with --insecure put one without a source in `env`."""
    for account in ACCOUNTS:
        value = read_hash(
            getattr(args, _dest(account.hash_option)),
            getattr(args, _dest(account.hash_option) + "_file"),
            environ,
            account,
        )
        if value is None:
            continue
        forbidden = ("", "root", "guest", account.username(env))
        why = hash_problem(value, forbidden)
        if why:
            raise InvalidOptions(f"{account.hash_option}: {why}")
        if account.setting in secrets:
            continue  # checked; the replicas read it from the secret store
        if not args.insecure:
            raise InvalidOptions(
                f"{account.hash_option} needs {account.secret_option} SOURCE, where your "
                "secret store holds that hash: no secret goes into the app's plain env "
                "(--insecure puts it there)"
            )
        if any(setting_of(key) == account.setting for key in env):
            raise InvalidOptions(f"{account.hash_option} and --env {account.setting} both given")
        env[account.setting] = value


def _warn(lines: Sequence[str], because: str = "--insecure") -> None:
    if not lines:
        return
    print(f"{_PROG}: WARNING: INSECURE deployment ({because}):", file=sys.stderr)
    for line in lines:
        print(f"{_PROG}: WARNING:   {line}", file=sys.stderr)


def _tls(spec: AppSpec, cacert: Path | None) -> tuple[str, ssl.SSLContext | None]:
    """The scheme the replicas serve and, for https, the CAs their certificates are checked
    against (`cacert`, else the system's)."""
    if not spec.serves_tls():
        if cacert is not None:
            raise InvalidOptions(
                "--cacert is for replicas that serve https: give http_tls_cert_file "
                "(--env or --secret) too, or drop --cacert"
            )
        return "http", None
    try:
        return "https", ssl.create_default_context(
            cafile=str(cacert) if cacert is not None else None
        )
    except (OSError, ssl.SSLError) as exc:
        raise InvalidOptions(f"--cacert {cacert}: cannot read CA certificates ({exc})") from exc


def _check_logins(
    spec: AppSpec,
    leader: str,
    timeout_s: float,
    scheme: str = "http",
    tls: ssl.SSLContext | None = None,
) -> None:
    """Fail (or with --insecure warn) when the new leader accepts a default login."""
    logins = [(a.username(spec.env), a.default_password) for a in ACCOUNTS]
    outcomes = try_logins(leader, logins, timeout_s, scheme, tls)
    accepted = [f"{u}/{p}" for (u, p), outcome in outcomes.items() if outcome == "accepted"]
    for (user, password), outcome in outcomes.items():
        if outcome == "refused":
            print(f"default login {user}/{password} refused by the leader")
        elif outcome != "accepted":
            print(
                f"{_PROG}: WARNING: could not check the default login {user}/{password} "
                f"({outcome.removeprefix('unknown: ')})",
                file=sys.stderr,
            )
    if not accepted:
        return
    found = f"the leader {leader} accepts the default login {' and '.join(accepted)}"
    if spec.insecure:
        _warn([found])
        return
    raise DeployError(
        f"deployed, but {found}: the replicas did not get their password hashes from the "
        "secret store (Marathon needs --enable_features secrets and a secrets plugin that "
        "serves the sources you gave), or a stored hash is of the default password"
    )


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Do what `args` ask; raises DeployError on any failure the user must fix."""
    out: Path = args.artifact_out or _DEFAULT_OUT
    builds_artifact = not args.artifact_url and not args.container_image
    artifact_url: str = (
        "" if args.container_image else (args.artifact_url or out.resolve().as_uri())
    )
    env = _env(args.env)
    secrets = _secrets(args)
    _checked_hashes(args, env, secrets, os.environ if environ is None else environ)
    spec = AppSpec(
        zk_servers=args.zk,
        mesos_url=args.mesos,
        artifact_url=artifact_url,
        app_id=args.app_id,
        instances=args.instances,
        cpus=args.cpus,
        mem_mb=args.mem,
        env=env,
        image=args.image,
        container_image=args.container_image,
        secrets=secrets,
        insecure=args.insecure,
        insecure_zk=args.insecure_zk,
    )
    app = render(spec)
    scheme, tls = _tls(spec, args.cacert)
    flags = [
        f for f, on in (("--insecure", args.insecure), ("--insecure-zk", args.insecure_zk)) if on
    ]
    _warn(spec.warnings(), " ".join(flags))
    if args.dry_run:
        print(json.dumps(app, indent=2))
        return 0
    if builds_artifact:
        try:
            print(f"artifact {build_artifact(out)}")
        except OSError as exc:
            raise DeployError(f"cannot build the artifact at {out}: {exc}") from exc
    deployer = Deployer(
        MarathonClient(args.marathon),
        timeout_s=args.timeout,
        poll_interval_s=args.poll_interval,
        scheme=scheme,
        tls=tls,
    )
    try:
        done = deployer.deploy(app)
    except DefinitionRejected as exc:
        if "Feature secrets is not enabled" not in exc.message:
            raise
        raise DefinitionRejected(
            f"{exc.message}; this Marathon has no secret store: start it with "
            "--enable_features secrets and a secrets plugin, or (insecure) pass the settings "
            "with --env and --insecure"
        ) from exc
    print(f"deployed {done.app_id} (deployment {done.deployment_id or 'none needed'})")
    for instance in done.instances:
        print(f"instance {instance.address} {instance.role}")
    print(f"leader {done.leader}")
    if done.leader:
        _check_logins(spec, done.leader, max(1.0, min(10.0, args.timeout)), scheme, tls)
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run(args, environ)
    except DeployError as exc:
        print(f"{_PROG}: error: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
