"""DATAFLOW jobs for the executor tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Numbers:
    """Serves 0..6 in batches of 3 (3 batches when streaming); records each processed batch."""

    def __init__(self) -> None:
        self._left = list(range(7))

    def fetch_data(self, ctx: Any) -> list[int]:
        batch, self._left = self._left[:3], self._left[3:]
        return batch

    def process_data(self, ctx: Any, items: list[int]) -> None:
        out = Path(ctx.job_parameter) / f"{ctx.job_name}-{ctx.sharding_item}.batches"
        with out.open("a") as handle:
            handle.write(json.dumps(items) + "\n")


class Broken(Numbers):
    def process_data(self, ctx: Any, items: list[int]) -> None:
        raise KeyError(f"no home for {items[0]}")


class OnlyFetch:
    def fetch_data(self, ctx: Any) -> list[int]:
        return []
