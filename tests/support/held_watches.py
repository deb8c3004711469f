"""Hold a kazoo client's watch callbacks for a while, as a slow watch thread would."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient

from scheduler.storage.registry import Registry


@contextmanager
def watches_held(client: KazooClient, registry: Registry) -> Iterator[None]:
    """Hold `client`'s watch callbacks (kazoo runs them one at a time on one thread) for the
    block: a watch that fires meanwhile reaches its callback only after it. What the block sees
    of a change is then what does not wait on a callback (a writer's own note, a read)."""
    entered, release = threading.Event(), threading.Event()

    def hold(_event: object) -> None:
        entered.set()
        release.wait(30)

    path = registry.abs(f"/hold-{uuid.uuid4().hex[:8]}")
    client.exists(path, watch=hold)
    client.create(path, b"", makepath=True)
    assert entered.wait(10), "kazoo's watch thread did not take the holding callback"
    try:
        yield
    finally:
        release.set()
