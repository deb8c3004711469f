"""Fixtures of the executor's Mesos tests: the stand-in, a recording framework, app archives."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.localmesos import LocalMesos
from executor.package import build_app_archive
from tests.support.mesosfw import App, Framework, RecordingScheduler

from .helpers import TEST_APP

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "demo_app"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def app_archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test app packaged both ways, and the demo app, by the packaging command's code."""
    out = tmp_path_factory.mktemp("archives")
    return {
        "installed": build_app_archive(
            TEST_APP, out / "testapp.tar.gz", python=sys.executable
        ).path,
        "bundled": build_app_archive(
            TEST_APP, out / "testapp-bundled.tar.gz", bundle_executor=True
        ).path,
        "demo": build_app_archive(EXAMPLES, out / "demo_app.tar.gz").path,
    }


@pytest.fixture
def test_app(app_archives: dict[str, Path]) -> App:
    """The test app, executor from this installation (python baked into start.sh)."""
    return App("testapp", app_archives["installed"], environment={"EJC_KILL_GRACE_SECONDS": "1"})


@pytest.fixture
def mesos(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalMesos]:
    cluster = LocalMesos(
        port=0,
        work_dir=tmp_path / "mesos",
        allocation_interval_s=0.2,
        executor_shutdown_grace_period_s=5.0,
    ).start()
    yield cluster
    if request.node.stash.get(_FAILED, False):
        _dump_sandboxes(cluster.work_dir)
    cluster.stop(timeout_s=15.0)


@pytest.fixture
def framework(mesos: LocalMesos) -> Iterator[Framework]:
    """A pymesos driver subscribed to the stand-in; stopped after the test, pass or fail.

    Its scheduler refuses offers for an hour and revives them when a task is queued: quiet
    while idle, and no wait for a filter to run out when there is work.
    """
    scheduler = RecordingScheduler(refuse_s=3600.0, revive_on_launch=True)
    framework = Framework(
        mesos.address, scheduler, user="", name="executor-tests", hostname="localhost"
    )
    try:
        yield framework.start(timeout_s=15.0)
    finally:
        framework.stop()


@pytest.fixture
def scheduler(framework: Framework) -> RecordingScheduler:
    """What `framework` recorded, and where its tasks are queued."""
    return framework.scheduler


def sandboxes(work_dir: Path, executor_id: str) -> list[Path]:
    runs = work_dir.glob(f"slaves/*/frameworks/*/executors/{executor_id}/runs/*")
    return sorted(path for path in runs if not path.is_symlink())  # not runs/latest


def _dump_sandboxes(work_dir: Path) -> None:
    for path in sorted(work_dir.glob("slaves/*/frameworks/*/executors/*/runs/*/std*")):
        if path.parent.is_symlink():
            continue
        tail = path.read_text(errors="replace").splitlines()[-40:]
        print(f"\n--- {path} (last 40 lines) ---\n" + "\n".join(tail))
