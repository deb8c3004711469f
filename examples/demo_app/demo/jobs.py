"""The demo app's job code. Each job gets a `JobContext` (`executor.context.JobContext`):
ctx.job_name, ctx.task_id, ctx.sharding_total_count, ctx.sharding_item, ctx.sharding_parameter,
ctx.job_parameter and ctx.job_properties.

Register them with jobClass `demo.jobs:hello` (SIMPLE) and `demo.jobs:NumberSquares`
(DATAFLOW, streamingProcess on or off).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def hello(ctx: Any) -> None:
    """SIMPLE: greet from this shard. `jobParameter` "fail" makes it fail (to see TASK_FAILED)."""
    print(
        f"hello from {ctx.job_name} shard {ctx.sharding_item}/{ctx.sharding_total_count}"
        f" (parameter {ctx.sharding_parameter!r}, job parameter {ctx.job_parameter!r})",
        flush=True,
    )
    if ctx.job_parameter == "fail":
        raise RuntimeError(f"shard {ctx.sharding_item} was asked to fail")


class NumberSquares:
    """DATAFLOW: squares the numbers of this shard, a batch at a time.

    The numbers 0..N-1 (N = jobParameter, default 12) are split across the shards by
    `n % shardingTotalCount`. With `streamingProcess` on, batches of 3 are fetched and processed
    until none are left; with it off, a single batch is.
    """

    batch_size = 3

    def __init__(self) -> None:
        self._next = 0

    def fetch_data(self, ctx: Any) -> list[int]:
        total = int(ctx.job_parameter or 12)
        mine = [n for n in range(total) if n % ctx.sharding_total_count == ctx.sharding_item]
        batch = mine[self._next : self._next + self.batch_size]
        self._next += len(batch)
        return batch

    def process_data(self, ctx: Any, items: list[int]) -> None:
        print(f"{ctx.job_name} shard {ctx.sharding_item}: {[n * n for n in items]}", flush=True)
