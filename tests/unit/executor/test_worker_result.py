from __future__ import annotations

import json

from executor.process import WorkerExit
from executor.worker import MAX_RESULT_BYTES, RunResult, summarize_exception


def raise_here() -> None:
    raise ValueError("bad row 7")


def test_an_exception_is_summarized_by_its_last_line_and_place() -> None:
    try:
        raise_here()
    except ValueError as exc:
        summary = summarize_exception(exc)
    assert summary.startswith("ValueError: bad row 7 (at ")
    assert summary.endswith("test_worker_result.py:10 in raise_here)")


def test_a_huge_result_still_fits_the_pipe() -> None:
    result = RunResult(False, "s" * 50_000, "c" * 500_000, {"big": "d" * 100_000})
    raw = result.encode()
    assert len(raw) <= MAX_RESULT_BYTES
    doc = json.loads(raw)
    assert doc["success"] is False
    assert doc["failureCause"].endswith("c")


def test_a_worker_that_wrote_nothing_is_described_by_its_exit_status() -> None:
    assert WorkerExit(-9, None).summary == "the job's worker process was killed by SIGKILL"
    assert not WorkerExit(0, None).success
    assert WorkerExit(0, {"success": True}).success
    failed = WorkerExit(1, {"success": False, "summary": "KeyError: 'x'", "failureCause": "tb"})
    assert (failed.summary, failed.failure_cause) == ("KeyError: 'x'", "tb")
