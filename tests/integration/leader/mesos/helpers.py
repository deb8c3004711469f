"""Pieces the launcher's tests share: a term that acts, framework ids kept in memory, settings
for a driver of the stand-in."""

from __future__ import annotations

from scheduler.model.settings import Settings, load_settings
from tests.support.mesosfw import StandIn


class Acting:
    acting = True


class FrameworkIds:
    def __init__(self) -> None:
        self.framework_id: str | None = None

    def save(self, framework_id: str) -> None:
        self.framework_id = framework_id

    def clear(self) -> None:
        self.framework_id = None


def settings_for(standin: StandIn, zk_namespace: str) -> Settings:
    return load_settings({}, {}, {"mesos_url": standin.address, "zk_namespace": zk_namespace})
