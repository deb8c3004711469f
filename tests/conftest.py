"""Fixtures shared by every suite: a real ZooKeeper per test session, clients chrooted per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from kazoo.client import KazooClient

from deploy import children
from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.storage.zk_handler import PollingHandler, use_buffered_reads
from tests.support.certificates import self_signed

# `postgres` (one server per session) and `postgres_url` (a fresh database per test); how the
# suite runs in parallel (which files keep to one worker, see tests/support/parallel.py).
pytest_plugins = ["tests.support.postgres", "tests.support.parallel"]

# Property tests are judged by their examples, never by their speed: Hypothesis's default 200-ms
# deadline per example and its "input generation is slow" check are timed assertions, and failed
# on a loaded machine (8 workers on 2 cores). Every example still runs and is still checked.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

_ensembles: list[ZooKeeperEnsemble] = []


@pytest.fixture(scope="session")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """One real ZooKeeper server for the whole session (never skipped: set-up installs it),
    started quick (`ZooKeeperServer.quick_start`: the suite is CPU-bound on 2 cores)."""
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"), size=1, quick_start=True)
    ensemble.start()
    _ensembles.append(ensemble)
    yield ensemble
    ensemble.stop()
    _ensembles.remove(ensemble)


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate (and key) for localhost and 127.0.0.1, made with openssl."""
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def zk_namespace() -> str:
    """A namespace no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_client(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    # With the replica's own handler and chunked reads (`acl.make_client`), so that every test
    # on this client runs them too.
    client = use_buffered_reads(KazooClient(hosts=zk.hosts, timeout=4, handler=PollingHandler()))
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(params=["sqlite", "postgresql"], ids=["sqlite", "postgresql"])
def trace_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The SQLAlchemy URL of an empty trace database, once per backend.

    sqlite: a file in the test's tmp_path (its folder is created by create_trace_engine).
    postgresql: a fresh database on the session's server (`postgres_url`), which is started only
    for this parameter.
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/data/trace.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


def pytest_exception_interact(
    node: pytest.Item, call: pytest.CallInfo[None], report: object
) -> None:
    """On a failure, show the end of each running ZooKeeper's log."""
    for ensemble in _ensembles:
        for server in ensemble.servers:
            path: Path = server.log_path
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-20:]
                print(f"\n--- {path} (last 20 lines) ---\n" + "\n".join(tail))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill the process group of every child a test started and did not stop.

    Fixtures stop what they start; this catches what a broken test or fixture left. Children
    also die with this process however it ends (see deploy.children).
    """
    killed = children.kill_leftovers()
    if killed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"killed process groups left behind by tests: {sorted(killed)}"
        if reporter is not None:
            reporter.write_line(line, yellow=True)
        else:
            print(line)
