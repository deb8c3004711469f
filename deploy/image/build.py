"""Build the scheduler's and the executor's container images with podman (`./dev.sh image`).

    .venv/bin/python -m deploy.image.build                 # on python:3.11-slim (a registry)
    .venv/bin/python -m deploy.image.build --local-base    # on a Debian base made here

Every wheel is made on this host, so the image build reads no network: `fill_context` puts
into `build/image/context` a wheel of each distribution of `requirements-run.lock` and of the
postgresql extra's entries of `requirements.lock` (downloaded with `pip wheel
--require-hashes`, so each file is checked against the lock's hash; kept until the locks
change), the http-parser wheel `./dev.sh setup` builds (`build/http-parser/wheels`),
the list of the runtime distributions with the sha256 of each wheel (`wheels/runtime.txt`,
what pip's resolver picks for `ejcloud[postgresql]` from those wheels alone) and this project's
wheel (`project/`). The Containerfile installs `runtime.txt` with `--require-hashes --no-index`
in one layer (cached by podman while the lock stays) and the project in the next.

`local_base` makes a base image without any registry: Debian bookworm (CPython 3.11) by
`mmdebstrap` into `podman import`, reused while its recipe is the same. Podman here runs with
the containers.conf of `podman_env` (no default ulimits: this machine's kernel refuses
podman's; the runc runtime) unless CONTAINERS_CONF is set already.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
LOCK = ROOT / "requirements.lock"
# The runtime part of the lock (`./dev.sh lock` writes it); with the postgresql extra's
# distributions taken from the whole lock, what the image installs.
RUN_LOCK = ROOT / "requirements-run.lock"
_EXTRA_FROM_LOCK = ("psycopg", "psycopg-binary")
BUILD_DIR = ROOT / "build" / "image"
CONTEXT = BUILD_DIR / "context"
HTTP_PARSER_WHEELS = ROOT / "build" / "http-parser" / "wheels"
HEALTHCHECK = Path(__file__).resolve().parent / "healthcheck.py"
DEFAULT_BASE = "python:3.11-slim"
LOCAL_BASE = "localhost/ejcloud-base:bookworm"
TARGETS = ("scheduler", "executor")
# What the project's wheel is built from (deploy/ and tests/ never go into an image).
_PROJECT_PARTS = ("scheduler", "executor", "ejcloud_cli", "marathon", "pyproject.toml", "README.md")
# The local base: Debian bookworm's python3 is CPython 3.11; python3-venv brings ensurepip.
_BASE_SUITE = "bookworm"
_BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
_BASE_MIRROR = "http://deb.debian.org/debian"
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
_CONTAINERS_CONF = """\
# Written by deploy/image/build.py: podman on this machine's kernel, which refuses the default
# resource limits podman asks for.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
"""


class ImageError(RuntimeError):
    """A step of the build failed; the message says which and why."""


def version() -> str:
    """The project's version (pyproject.toml), the images' tag and label."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        found: str = tomllib.load(f)["project"]["version"]
        return found


def podman_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for podman: `environ` (default os.environ) with CONTAINERS_CONF naming
    build/image/containers.conf (written) unless it names one already."""
    env = dict(os.environ if environ is None else environ)
    if not env.get("CONTAINERS_CONF"):
        conf = BUILD_DIR / "containers.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        if not conf.exists() or conf.read_text() != _CONTAINERS_CONF:
            conf.write_text(_CONTAINERS_CONF)
        env["CONTAINERS_CONF"] = str(conf)
    return env


def _run(args: Sequence[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(args), text=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    except OSError as exc:
        raise ImageError(f"{what}: cannot run {args[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout or "").strip().splitlines()[-15:])
        raise ImageError(f"{what} failed (exit {done.returncode}):\n{tail}")
    result: subprocess.CompletedProcess[str] = done
    return result


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _http_parser_wheel() -> Path:
    found = sorted(HTTP_PARSER_WHEELS.glob("http_parser-0.9.0-*.whl"))
    if not found:
        raise ImageError(
            f"no http-parser wheel in {HTTP_PARSER_WHEELS}: run ./dev.sh setup first "
            "(it builds one; pymesos needs it)"
        )
    return found[0]


def _lock_entries(lock: Path, names: Sequence[str]) -> str:
    """The entries (`name==version` and its hash lines) of `names` in `lock`."""
    wanted = {re.sub(r"[-_.]+", "-", n).lower() for n in names}
    picked: list[str] = []
    keep = False
    for line in lock.read_text().splitlines():
        match = _ENTRY.match(line)
        if match:
            keep = re.sub(r"[-_.]+", "-", match.group(1)).lower() in wanted
        elif not line.startswith(" "):
            keep = False
        if keep and not line.lstrip().startswith("#"):
            picked.append(line)
    return "\n".join(picked) + "\n"


def _lock_wheels(python: str, wheels: Path) -> None:
    """A wheel of each distribution the image may install in `wheels`, kept while the locks
    and the http-parser wheel are the same (a stamp of their digests)."""
    parser_wheel = _http_parser_wheel()
    stamp = wheels / ".lock-sha256"
    want = f"{_sha256(RUN_LOCK)} {_sha256(LOCK)} {_sha256(parser_wheel)}"
    if stamp.exists() and stamp.read_text() == want:
        return
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="ejcloud-lock-") as tmp:
        wanted = Path(tmp) / "image.lock"
        wanted.write_text(RUN_LOCK.read_text() + _lock_entries(LOCK, _EXTRA_FROM_LOCK))
        _run(
            [python, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
             "--require-hashes", "--no-deps", "-r", str(wanted), "-w", str(wheels)],
            "pip wheel of requirements-run.lock and the postgresql extra",
        )  # fmt: skip
    shutil.copy2(parser_wheel, wheels / parser_wheel.name)
    stamp.write_text(want)


def _project_wheel(python: str, out: Path) -> Path:
    """This project's wheel, built from a copy of its sources (no build/ or egg-info left in
    the checkout, and no stale file of an earlier build in the wheel)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache")
    with tempfile.TemporaryDirectory(prefix="ejcloud-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for part in _PROJECT_PARTS:
            path = ROOT / part
            if path.is_dir():
                shutil.copytree(path, src / part, ignore=ignore)
            else:
                shutil.copy2(path, src / part)
        _run(
            [python, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
             "--no-build-isolation", str(src), "-w", str(out)],
            "pip wheel of the project",
            # The same sources make the same bytes (zip times), so podman's cache holds.
            env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"},
        )  # fmt: skip
    (wheel,) = sorted(out.glob("ejcloud-*.whl"))
    return wheel


def _runtime_list(python: str, wheels: Path, project: Path) -> None:
    """wheels/runtime.txt: what pip installs for `ejcloud[postgresql]` from `wheels` alone,
    each wheel pinned by its sha256. Rewritten only when it changes (podman's layer cache)."""
    with tempfile.TemporaryDirectory(prefix="ejcloud-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        _run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--dry-run",
             "--ignore-installed", "--no-index", "--find-links", str(wheels),
             "--report", str(report), f"ejcloud[postgresql] @ {project.as_uri()}"],
            "resolving the runtime distributions",
        )  # fmt: skip
        chosen = json.loads(report.read_text())["install"]
    lines = []
    for item in chosen:
        name = item["metadata"]["name"]
        if name.lower() == "ejcloud":
            continue
        wheel = wheels / Path(item["download_info"]["url"].removeprefix("file://")).name
        lines.append(f"{name}=={item['metadata']['version']} --hash=sha256:{_sha256(wheel)}")
    text = "\n".join(sorted(lines, key=str.lower)) + "\n"
    target = wheels / "runtime.txt"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


def fill_context(python: str = sys.executable) -> Path:
    """Fill build/image/context (see the module's docstring) and return it."""
    wheels = CONTEXT / "wheels"
    _lock_wheels(python, wheels)
    project = _project_wheel(python, CONTEXT / "project")
    _runtime_list(python, wheels, project)
    shutil.copy2(HEALTHCHECK, CONTEXT / "healthcheck.py")
    return CONTEXT


def image_exists(ref: str, env: Mapping[str, str]) -> bool:
    return (
        subprocess.run(
            ["podman", "image", "exists", ref], env=dict(env), capture_output=True
        ).returncode
        == 0
    )


def _image_id(ref: str, env: Mapping[str, str]) -> str:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
        env=dict(env), capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else ""


def image_label(ref: str, label: str, env: Mapping[str, str]) -> str:
    """A label of a local image, "" when the image or the label is missing."""
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{json .Labels}}", ref],
        env=dict(env), capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return ""
    labels = json.loads(done.stdout or "null") or {}
    return str(labels.get(label, ""))


def local_base(tag: str = LOCAL_BASE, env: Mapping[str, str] | None = None) -> str:
    """A Debian bookworm base image made here with mmdebstrap (no registry), reused while its
    recipe (suite, packages) is the same. Returns its reference."""
    env = podman_env() if env is None else env
    with _build_lock():
        return _local_base(tag, env)


def _local_base(tag: str, env: Mapping[str, str]) -> str:
    recipe = hashlib.sha256(
        json.dumps([_BASE_SUITE, _BASE_PACKAGES, _BASE_MIRROR]).encode()
    ).hexdigest()[:16]
    if image_label(tag, "ejcloud.base-recipe", env) == recipe:
        return tag
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is missing: apt-get install mmdebstrap (Debian)")
    with tempfile.TemporaryDirectory(prefix="ejcloud-base-") as tmp:
        tar = Path(tmp) / "base.tar"
        _run(
            ["mmdebstrap", "--quiet", "--variant=minbase",
             f"--include={','.join(_BASE_PACKAGES)}",
             "--dpkgopt=path-exclude=/usr/share/doc/*",
             "--dpkgopt=path-exclude=/usr/share/man/*",
             "--dpkgopt=path-exclude=/usr/share/locale/*",
             _BASE_SUITE, str(tar), _BASE_MIRROR],
            "mmdebstrap of the base image",
        )  # fmt: skip
        _run(
            ["podman", "import", "--quiet",
             "--change", f"LABEL ejcloud.base-recipe={recipe}",
             "--change", 'CMD ["/bin/bash"]', str(tar), tag],
            "podman import of the base image",
            env=dict(env),
        )  # fmt: skip
    return tag


def build(
    base: str = DEFAULT_BASE,
    targets: Sequence[str] = TARGETS,
    repository: str = "localhost/ejcloud",
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Build each target of the Containerfile on `base`; returns target -> image reference
    (`{repository}-{target}:{version}`, also tagged `latest`)."""
    env = podman_env() if env is None else env
    if shutil.which("podman") is None:
        raise ImageError("podman is missing: apt-get install podman buildah runc (Debian)")
    with _build_lock():
        return _build(base, targets, repository, python, env)


@contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time on this checkout (they share build/image/context and the tags)."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(
    base: str, targets: Sequence[str], repository: str, python: str, env: Mapping[str, str]
) -> dict[str, str]:
    context = fill_context(python)
    tag_version = version()
    built: dict[str, str] = {}
    for target in targets:
        if target not in TARGETS:
            raise ImageError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
        ref = f"{repository}-{target}:{tag_version}"
        before = _image_id(ref, env)
        pull = "--pull=never" if base.startswith("localhost/") else "--pull=missing"
        _run(
            # --network none: the RUN steps reach no network (pip has every wheel it needs).
            ["podman", "build", "--quiet", "--format", "docker", "--network", "none", pull,
             "--build-arg", f"BASE={base}", "--build-arg", f"VERSION={tag_version}",
             "--target", target, "--tag", ref, "--tag", f"{repository}-{target}:latest",
             "--file", str(CONTAINERFILE), str(context)],
            f"podman build of {target}",
            env=dict(env),
        )  # fmt: skip
        built[target] = ref
        replaced = before and before != _image_id(ref, env)
        if replaced:
            # The image this tag named before, now nameless: removed unless a container uses it.
            subprocess.run(["podman", "rmi", before], env=dict(env), capture_output=True)
    return built


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m deploy.image.build",
        description="Build the scheduler's and the executor's container images with podman.",
    )
    bases = p.add_mutually_exclusive_group()
    bases.add_argument(
        "--base", default=DEFAULT_BASE, help=f"the base image (default {DEFAULT_BASE})"
    )
    bases.add_argument(
        "--local-base",
        action="store_true",
        help=f"make a Debian bookworm base here with mmdebstrap ({LOCAL_BASE}), no registry",
    )
    p.add_argument("--target", choices=TARGETS, action="append", help="only this target")
    p.add_argument("--repository", default="localhost/ejcloud", help="image name prefix")
    args = p.parse_args(argv)
    try:
        env = podman_env()
        base = local_base(env=env) if args.local_base else args.base
        built = build(base, args.target or TARGETS, args.repository, env=env)
    except ImageError as exc:
        hint = ""
        if "pinging container registry" in str(exc) or "initializing source" in str(exc):
            hint = f"\nthe base {args.base} could not be pulled: --local-base makes one here"
        print(f"deploy.image.build: {exc}{hint}", file=sys.stderr)
        return 1
    for target, ref in built.items():
        print(f"{target} {ref}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
