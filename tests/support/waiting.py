"""Wait on conditions with a deadline instead of sleeping."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None],
    timeout_s: float,
    interval_s: float = 0.02,
    message: str = "condition",
) -> T:
    """Call `predicate` until it returns a truthy value and return that value.

    Exceptions from the predicate count as "not yet". Raises AssertionError naming `message`
    (and the last exception) after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - "not yet", reported on timeout
            if isinstance(exc, urllib.error.HTTPError):
                # It holds its answer's connection: closed now, or the garbage collector finds
                # the socket later and its ResourceWarning fails whichever test that is in.
                exc.close()
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}") from (
                last_error
            )
        time.sleep(interval_s)
