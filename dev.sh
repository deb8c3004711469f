#!/usr/bin/env bash
# The project's one entry point for people and CI.
#   ./dev.sh run [options]   set everything up, then start the local system (see README)
#   ./dev.sh test [args]     set everything up, then lint, type-check and run the test suite
#   ./dev.sh bench [name]    set everything up, then run the benchmarks and print their figures
#   ./dev.sh setup           only set up (.venv, ZooKeeper, PostgreSQL)
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

ensure_postgresql() {
  # Debian's postgresql package: deploy/postgres.py runs its initdb and postgres binaries for
  # the tests and benchmarks, each server in a directory of its own (not the packaged cluster).
  if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    log "installing the Debian postgresql package"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
}

ensure_http_parser() {
  # pymesos 0.3.15 depends on http-parser 0.9.0, whose published C file includes longintrepr.h
  # (gone in Python 3.11). Regenerate the C file from its .pyx with Cython 0.29 and build a
  # wheel once; pymesos then installs unchanged on top of it.
  if "$PY" -c "import http_parser.parser" 2>/dev/null; then return; fi
  local build="$ROOT/build/http-parser"
  local wheel
  wheel=$(ls "$build"/wheels/http_parser-0.9.0-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$wheel" ]; then
    log "building http-parser 0.9.0 for $("$PY" -V)"
    rm -rf "$build" && mkdir -p "$build"
    python3 -m venv "$build/venv"
    "$build/venv/bin/pip" install -q "cython<3" wheel setuptools
    "$build/venv/bin/pip" download -q --no-deps --no-binary :all: http-parser==0.9.0 -d "$build"
    tar xzf "$build"/http-parser-0.9.0.tar.gz -C "$build"
    (cd "$build/http-parser-0.9.0" \
      && "$build/venv/bin/cython" http_parser/parser.pyx -o http_parser/parser.c 2>/dev/null \
      && rm -f http_parser/*.so \
      && "$build/venv/bin/pip" wheel -q --no-deps --no-build-isolation . -w "$build/wheels")
    wheel=$(ls "$build"/wheels/http_parser-0.9.0-*.whl | head -n1)
  fi
  "$VENV/bin/pip" install -q "$wheel"
}

setup() {
  ensure_zookeeper
  ensure_postgresql
  if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
  fi
  ensure_http_parser
  local stamp="$VENV/.ejcloud-installed"
  local want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing ejcloud and its dependencies into $VENV"
    "$VENV/bin/pip" install -q -e ".[dev]"
    echo "$want" > "$stamp"
  fi
}

cmd=${1:-help}
shift || true
case "$cmd" in
  setup) setup ;;
  run)
    setup
    exec "$PY" -m deploy.cluster "$@"
    ;;
  test)
    setup
    log "ruff"
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    log "mypy"
    "$VENV/bin/mypy"
    log "pytest"
    exec "$VENV/bin/pytest" "$@"
    ;;
  bench)
    setup
    exec "$PY" -m tests.bench "$@"
    ;;
  *)
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
