"""The Mesos framework id at `/ha/framework_id`: read at term start, written and cleared fenced."""

from __future__ import annotations

import logging
import re

from scheduler.leader.lifecycle import LeaderComponent
from scheduler.model.errors import SchedulerError
from scheduler.storage.layout import FRAMEWORK_ID
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter

log = logging.getLogger(__name__)

_VALID_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


class InvalidFrameworkId(SchedulerError):
    """The framework id node, or Mesos, holds something that is not a framework id."""


class FrameworkIdStore(LeaderComponent):
    """Keeps the framework id so every leader fails over the same Mesos framework.

    A node that holds something that is not a framework id refuses the term: registering a new
    framework would orphan every running task, so a person must look (fix or delete the node).
    """

    name = "framework-id"

    def __init__(self, registry: Registry, fence: Fence) -> None:
        self._registry = registry
        self._fence = fence
        self._framework_id: str | None = None

    @property
    def framework_id(self) -> str | None:
        return self._framework_id

    def start(self) -> None:
        data = self._registry.get(FRAMEWORK_ID)
        if data is None or data == b"":
            self._framework_id = None
            log.info("framework id: none stored; Mesos will assign one")
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if not _VALID_ID.match(text):
            raise InvalidFrameworkId(
                f"{FRAMEWORK_ID} holds {data[:60]!r}, which is not a Mesos framework id; "
                "fix the node, or delete it to register a new framework (tasks of the old one "
                "are then orphaned)"
            )
        self._framework_id = text
        log.info("framework id: %s (this leader fails over that framework)", text)

    def save(self, framework_id: str) -> None:
        """Store the id Mesos assigned (fenced). Raises NotLeader when the term is over."""
        if not _VALID_ID.match(framework_id):
            raise InvalidFrameworkId(f"Mesos sent an invalid framework id {framework_id!r}")
        if framework_id == self._framework_id:
            return
        FencedWriter(self._registry, self._fence).put(FRAMEWORK_ID, framework_id.encode("utf-8"))
        log.info("framework id: saved %s", framework_id)
        self._framework_id = framework_id

    def clear(self) -> None:
        """Forget the id after Mesos removed the framework (fenced)."""
        FencedWriter(self._registry, self._fence).delete(FRAMEWORK_ID)
        log.warning("framework id: cleared %s (Mesos removed the framework)", self._framework_id)
        self._framework_id = None
