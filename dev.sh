#!/usr/bin/env bash
# The project's one entry point for people and CI.
#   ./dev.sh run [options]   set up what running needs, then start the local system (see README)
#   ./dev.sh test [args]     set everything up, then lint, type-check and run the test suite
#   ./dev.sh bench [name]    set everything up, then run the benchmarks and print their figures
#   ./dev.sh image [args]    build the scheduler's and the executor's container images (podman)
#   ./dev.sh setup           only set up (.venv from requirements.lock, ZooKeeper, PostgreSQL, chromium)
#   ./dev.sh setup-run       only set up what running needs (.venv from requirements-run.lock, ZooKeeper)
#   ./dev.sh lock            refresh requirements.lock and requirements-run.lock from pyproject.toml (uv)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '[dev.sh] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_zookeeper() {
  # Debian's zookeeper package (3.8) puts its jars in /usr/share/java.
  if [ ! -f /usr/share/java/zookeeper.jar ]; then
    log "installing the Debian zookeeper package"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
  fi
  command -v java >/dev/null || { log "java is missing: install a JRE (17)"; exit 1; }
}

ensure_chromium() {
  # Debian's chromium: the web console's browser tests drive it through Playwright (which
  # downloads no browser of its own here).
  if ! command -v chromium >/dev/null; then
    log "installing the Debian chromium package"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
}

ensure_postgresql() {
  # Debian's postgresql package: deploy/postgres.py runs its initdb and postgres binaries for
  # the tests and benchmarks, each server in a directory of its own (not the packaged cluster).
  if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    log "installing the Debian postgresql package"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
}

ensure_container_tools() {
  # Debian's podman, buildah and runc build and run the container images (./dev.sh image and
  # tests/integration/container); mmdebstrap makes a base image where no registry is reachable.
  if ! command -v podman >/dev/null || ! command -v buildah >/dev/null \
    || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
    log "installing the Debian podman, buildah, runc and mmdebstrap packages"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc \
      mmdebstrap >/dev/null
  fi
}

# The lock: every distribution the set-up installs, pinned with hashes (see `./dev.sh lock`).
LOCK="$ROOT/requirements.lock"
# What running needs (the runtime dependencies alone, at the lock's versions and hashes):
# `./dev.sh run` installs only these, `./dev.sh test` the whole lock.
RUN_LOCK="$ROOT/requirements-run.lock"
BUILD_LOCK="$ROOT/requirements-build.lock"
UV_VERSION=0.13.9
HTTP_PARSER_SHA256=441d3a57c6227230f98aa97539da006fda0f8f4880bc4c5cd895ff2138a52621

ensure_http_parser() {
  # pymesos 0.3.15 depends on http-parser 0.9.0, whose published C file includes longintrepr.h
  # (gone in Python 3.11). Regenerate the C file from its .pyx with Cython 0.29 and build a
  # wheel once; pymesos then installs unchanged on top of it. The sdist is checked against its
  # hash and the build tools come from requirements-build.lock.
  if "$PY" -c "import http_parser.parser" 2>/dev/null; then return; fi
  local build="$ROOT/build/http-parser"
  local wheel
  wheel=$(ls "$build"/wheels/http_parser-0.9.0-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$wheel" ]; then
    log "building http-parser 0.9.0 for $("$PY" -V)"
    rm -rf "$build" && mkdir -p "$build"
    python3 -m venv "$build/venv"
    "$build/venv/bin/pip" install -q --require-hashes --no-deps -r "$BUILD_LOCK"
    "$build/venv/bin/pip" download -q --no-deps --no-binary :all: http-parser==0.9.0 -d "$build"
    echo "$HTTP_PARSER_SHA256  $build/http-parser-0.9.0.tar.gz" | sha256sum -c --quiet -
    tar xzf "$build"/http-parser-0.9.0.tar.gz -C "$build"
    (cd "$build/http-parser-0.9.0" \
      && "$build/venv/bin/cython" http_parser/parser.pyx -o http_parser/parser.c 2>/dev/null \
      && rm -f http_parser/*.so \
      && "$build/venv/bin/pip" wheel -q --no-deps --no-build-isolation . -w "$build/wheels")
    wheel=$(ls "$build"/wheels/http_parser-0.9.0-*.whl | head -n1)
  fi
  "$VENV/bin/pip" install -q --no-deps "$wheel"
}

remove_unlocked() {
  # Uninstall what the lock $1 does not name (left over from an older lock), so the environment
  # is exactly that lock plus http-parser and this project.
  local extra
  extra=$("$PY" - "$1" <<'PYEOF'
import re, sys
from importlib.metadata import distributions
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
locked = {norm(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", open(sys.argv[1]).read(), re.M)}
keep = locked | {"http-parser", "ejcloud"}
print(" ".join(sorted({norm(d.metadata["Name"]) for d in distributions()} - keep)))
PYEOF
)
  if [ -n "$extra" ]; then
    log "removing distributions the lock does not name: $extra"
    # shellcheck disable=SC2086
    "$VENV/bin/pip" uninstall -q -y $extra
  fi
}

install_python() {
  # The virtual environment holding exactly one lock ($1: full, the whole lock; run, the runtime
  # dependencies alone), this project (editable) and http-parser; redone when the lock changes.
  # An environment set up in full stays full (`./dev.sh run` after `./dev.sh test`).
  local mode=$1 lock stamp="$VENV/.ejcloud-installed" want
  if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  if [ "$mode" = run ] && [ -f "$stamp" ] && grep -q '^full:' "$stamp"; then mode=full; fi
  lock=$LOCK
  if [ "$mode" = run ]; then lock=$RUN_LOCK; fi
  want="$mode:$(cat "$lock" "$BUILD_LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing the locked dependencies ($(basename "$lock")) into $VENV"
    # Exactly the lock: every file checked against its hash, no resolver (--no-deps).
    "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$lock"
    ensure_http_parser
    remove_unlocked "$lock"
    log "installing ejcloud (editable) into $VENV"
    # setuptools' notice that an editable install imports from the checkout (which it is for)
    # is the only warning this prints; any other still shows.
    PYTHONWARNINGS="ignore:Editable installation" \
      "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
    "$VENV/bin/pip" check >/dev/null || { "$VENV/bin/pip" check; exit 1; }
    echo "$want" > "$stamp"
  fi
  ensure_http_parser
}

setup() {
  # Everything: running, the tests (PostgreSQL, chromium, the dev tools) and the benchmarks.
  ensure_zookeeper
  ensure_postgresql
  ensure_chromium
  install_python full
}

setup_run() {
  # What `./dev.sh run` needs: ZooKeeper and the runtime dependencies; no PostgreSQL, no
  # chromium, no test or lint tools.
  ensure_zookeeper
  install_python run
}

lock() {
  # Refresh the lock on purpose: resolve pyproject.toml's ranges (runtime, dev and postgresql
  # extras) for Python 3.11 with uv and pin every distribution with its hashes. http-parser is
  # left out: it is built from its hashed sdist by ensure_http_parser.
  local uv="$ROOT/build/uv/bin/uv"
  if [ ! -x "$uv" ] || [ "$("$uv" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    rm -rf "$ROOT/build/uv"
    python3 -m venv "$ROOT/build/uv"
    "$ROOT/build/uv/bin/pip" install -q "uv==$UV_VERSION"
  fi
  printf 'pip\nsetuptools\n' | "$uv" pip compile pyproject.toml - --extra dev --extra postgresql \
    --python-version 3.11 --generate-hashes --no-emit-package http-parser --upgrade \
    --custom-compile-command './dev.sh lock' -o "$LOCK" -q
  # The runtime part, pinned at the versions (and hashes) just locked: what `./dev.sh run` needs.
  printf 'pip\nsetuptools\n' | "$uv" pip compile pyproject.toml - -c "$LOCK" \
    --python-version 3.11 --generate-hashes --no-emit-package http-parser \
    --custom-compile-command './dev.sh lock' -o "$RUN_LOCK" -q
  printf 'cython<3\nwheel\nsetuptools\n' | "$uv" pip compile - --python-version 3.11 \
    --generate-hashes --upgrade --custom-compile-command './dev.sh lock' -o "$BUILD_LOCK" -q
  log "wrote $LOCK, $RUN_LOCK and $BUILD_LOCK; ./dev.sh setup installs them"
}

cmd=${1:-help}
shift || true
case "$cmd" in
  setup) setup ;;
  setup-run) setup_run ;;
  lock) lock ;;
  run)
    setup_run
    exec "$PY" -m deploy.cluster "$@"
    ;;
  test)
    setup
    ensure_container_tools
    log "ruff"
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    log "mypy"
    "$VENV/bin/mypy"
    # In parallel: EJC_TEST_WORKERS processes (default 6 on this 2-core machine: the tests mostly
    # wait on real processes; a clean run used 1.2 cores of 2 with 4 workers), each a session of its own; the files tests/support/parallel.py
    # groups keep to one worker, the longest group first (--no-loadscope-reorder keeps that order
    # instead of xdist's largest-count-first). `./dev.sh test -n 0` runs in this one process.
    log "pytest (-n ${EJC_TEST_WORKERS:-6} --dist loadgroup)"
    exec "$VENV/bin/pytest" -n "${EJC_TEST_WORKERS:-6}" --dist loadgroup --no-loadscope-reorder "$@"
    ;;
  image)
    # ./dev.sh image [--local-base | --base IMAGE] [--target scheduler|executor]
    setup
    ensure_container_tools
    exec "$PY" -m deploy.image.build "$@"
    ;;
  bench)
    setup
    exec "$PY" -m tests.bench "$@"
    ;;
  *)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
