"""Pieces the launcher's and the status handler's tests share: a term that acts, a status
update, framework ids kept in memory, settings for a driver of the stand-in, a script job
stored with its app, the tasks the stand-in's master knows, and the driver wired to a launcher
and a status handler as a term wires them."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path
from typing import Any

from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.status import StatusHandler
from scheduler.model.settings import Settings, load_settings
from scheduler.storage.term_stores import TermStores
from tests.support.mesosfw import StandIn


class Acting:
    acting = True


def status_update(task_id: str, state: str, message: str = "", **more: Any) -> dict[str, Any]:
    """A status update of `task_id` as pymesos hands it over (with a uuid: acknowledged)."""
    return {
        "task_id": {"value": task_id},
        "state": state,
        "message": message,
        "uuid": base64.b64encode(b"0123456789abcdef").decode(),
        **more,
    }


class FrameworkIds:
    def __init__(self) -> None:
        self.framework_id: str | None = None

    def save(self, framework_id: str) -> None:
        self.framework_id = framework_id

    def clear(self) -> None:
        self.framework_id = None


def settings_for(standin: StandIn, zk_namespace: str) -> Settings:
    return load_settings({}, {}, {"mesos_url": standin.address, "zk_namespace": zk_namespace})


def store_script_job(
    stores: TermStores, tmp_path: Path, name: str, script: str, **extra: Any
) -> None:
    """The app `app` (an archive holding run.sh, `script` in it) and the TRANSIENT SCRIPT job
    `name` of one shard running it, cron far away; `extra` overrides job fields."""
    path = tmp_path / "run.sh"
    path.write_text(f"#!/bin/sh\n{script}\n")
    archive = tmp_path / "run.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(path, arcname="run.sh")
    app = {"appName": "app", "appURL": str(archive), "bootstrapScript": "true"}
    job = {
        "jobName": name,
        "appName": "app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh run.sh",
        "cron": "0 0 3 * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.5,
        "memoryMB": 16,
        **extra,
    }
    stores.registry.create("/config/app/app", json.dumps(app).encode())
    stores.registry.create(f"/config/job/{name}", json.dumps(job).encode())


def master_tasks(standin: StandIn) -> list[dict[str, Any]]:
    """Every task the master knows, ended ones included: a task's terminal update is
    acknowledged within milliseconds, and Mesos then lists it under `completed_tasks`."""
    frameworks = standin.state()["frameworks"]
    return [t for f in frameworks for t in (*f["tasks"], *f.get("completed_tasks", ()))]


def wire_launcher(launcher: Launcher, driver: MesosDriver, stores: TermStores) -> StatusHandler:
    """Bind `driver` to `launcher` and a new status handler, as a term does: a task's end
    wakes the launcher when work is pending."""
    status = StatusHandler(stores, driver.kill, launcher.wake_for_work)
    driver.bind(
        DriverHandlers(
            on_offers=launcher.add_offers,
            on_rescind=launcher.rescind,
            on_status=status.handle,
            on_connected=launcher.on_connected,
            on_disconnected=launcher.drop_offers,
        )
    )
    return status
