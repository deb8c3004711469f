"""The fetcher: an executor shipped as an archive over HTTP, file URIs, the cache, failures."""

from __future__ import annotations

import functools
import os
import stat
import sys
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.mesosfw import (
    FIXTURE_EXECUTOR,
    Framework,
    RecordingScheduler,
    StandIn,
    command_task,
    executor_info,
    executor_task,
    wait_for,
)


class _CountingHandler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        self.requests.append(self.path)


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """An HTTP server over a directory: (base URL, directory, paths requested)."""
    root = tmp_path / "www"
    root.mkdir()
    requests: list[str] = []
    handler = type("Handler", (_CountingHandler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="test-www", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root, requests
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_an_archived_executor_is_fetched_extracted_and_cached(
    standin: StandIn,
    make_framework: Callable[..., Framework],
    file_server: tuple[str, Path, list[str]],
    tmp_path: Path,
) -> None:
    base_url, root, requests = file_server
    with tarfile.open(root / "app.tar.gz", "w:gz") as tar:
        tar.add(FIXTURE_EXECUTOR, arcname="app/bin/executor.py")
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool ran > tool.out\n")
    with zipfile.ZipFile(tmp_path / "conf.zip", "w") as archive:
        archive.writestr("conf/app.properties", "answer=42\n")

    uris: list[dict[str, Any]] = [
        {"value": f"{base_url}/app.tar.gz", "extract": True, "cache": True},
        {"value": f"file://{tool}", "executable": True},
        {"value": str(tmp_path / "conf.zip")},
    ]
    command = f"{sys.executable} app/bin/executor.py"
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler)
    scheduler.launch(
        executor_task("first", executor_info("app@-@one", command, uris)),
        executor_task("second", executor_info("app@-@two", command, uris)),
    )
    scheduler.wait_state("first", "TASK_FINISHED")  # the extracted executor ran
    scheduler.wait_state("second", "TASK_FINISHED")

    sandboxes = standin.sandboxes(framework.id)
    assert sorted(sandboxes) == ["app@-@one", "app@-@two"]
    for sandbox in sandboxes.values():
        assert (sandbox / "app" / "bin" / "executor.py").is_file()
        assert (sandbox / "app.tar.gz").is_file()  # Mesos keeps the archive
        assert os.stat(sandbox / "tool.sh").st_mode & stat.S_IXUSR
        assert (sandbox / "conf" / "app.properties").read_text() == "answer=42\n"
    assert requests.count("/app.tar.gz") == 1, "the second executor should hit the cache"


def test_a_command_task_runs_a_fetched_executable(
    make_framework: Callable[..., Framework], tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 7\n")
    scheduler = RecordingScheduler()
    make_framework(scheduler)
    task = command_task("job", "./job.sh")
    task["command"]["uris"] = [{"value": str(script), "executable": True}]
    scheduler.launch(task)
    failed = scheduler.wait_state("job", "TASK_FAILED")
    assert failed.status["message"] == "Command exited with status 7"


def test_a_missing_uri_fails_the_launch(
    make_framework: Callable[..., Framework], tmp_path: Path
) -> None:
    scheduler = RecordingScheduler()
    make_framework(scheduler)
    missing = tmp_path / "missing.tar.gz"
    scheduler.launch(
        executor_task("nofile", executor_info("app@-@missing", uris=[{"value": str(missing)}]))
    )
    failed = scheduler.wait_state("nofile", "TASK_FAILED")
    assert failed.status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
    assert str(missing) in failed.status["message"]
    wait_for(lambda: scheduler.failures, 10, message="FAILURE for the executor")
    assert scheduler.failures[0][0] == "app@-@missing"
