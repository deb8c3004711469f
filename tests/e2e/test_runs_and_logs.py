"""Runs, their logs, sandboxes and metrics on the local cluster: scheduler replicas, the Mesos
stand-in (two agents) and real executors and command tasks. The `ejcloud` CLI registers through
a standby and reads runs and logs like a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.zookeeper import ZooKeeperEnsemble
from executor.package import build_app_archive
from tests.e2e.pipeline_support import System, running_system
from tests.support.replicas import ROOT, ReplicaProcess, http_get
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

NEVER = "0 0 0 1 1 ? 2099"
# Characters of several UTF-8 lengths, so that a read cut in the middle of one shows.
MARK = "é✓😀"

JOBS_PY = f'''
import sys


def shout(ctx):
    """Prints its task id to stdout and to stderr, with some text around it."""
    for n in range(200):
        print(f"OUT {{ctx.task_id}} line {{n}} {MARK}", flush=True)
    print(f"ERR {{ctx.task_id}} {MARK}", file=sys.stderr, flush=True)
'''

SCRIPT_SH = """#!/bin/sh
echo "script-out $EJC_SHARDING_ITEM"
echo "script-err $EJC_SHARDING_ITEM" >&2
if [ "$EJC_SHARDING_ITEM" = "0" ]; then exit 3; fi
"""


@pytest.fixture
def system(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[System]:
    with running_system(zk.hosts, zk_namespace, tmp_path) as system:
        yield system


def _standby(system: System) -> ReplicaProcess:
    leader = system.leader()
    return next(r for r in system.replicas if r is not leader)


def _cli(system: System, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m ejcloud_cli` against the standby, with the admin's credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
    env.update(
        {
            "HOME": str(system.tmp / "home"),
            "XDG_CONFIG_HOME": str(system.tmp / "home" / ".config"),
            "COLUMNS": "250",
            "EJCLOUD_SERVER": f"http://{_standby(system).identity}",
            "EJCLOUD_USER": "root",
            "EJCLOUD_PASSWORD": "root",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "ejcloud_cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ok(system: System, *args: str) -> str:
    done = _cli(system, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def _runs(system: System, job: str) -> list[dict[str, Any]]:
    status, body = system.api("GET", f"/api/job/{job}/runs?limit=100")
    assert status == 200, body
    return list(body["runs"])


def _ended(system: System, job: str, count: int) -> list[dict[str, Any]]:
    def ended() -> list[dict[str, Any]] | None:
        runs = _runs(system, job)
        done = [r for r in runs if r["endTime"] is not None]
        return runs if len(done) == count == len(runs) else None

    found: list[dict[str, Any]] = wait_for(ended, 60, message=f"{count} ended runs of {job}")
    return found


def _log(system: System, job: str, task_id: str, **query: Any) -> tuple[int, Any]:
    text = "&".join(f"{k}={v}" for k, v in query.items())
    return system.api("GET", f"/api/job/{job}/runs/{quote(task_id, safe='')}/log?{text}")


def _read_all(
    system: System, job: str, task_id: str, stream: str, length: int, most: int = 10**9
) -> str:
    """The stream (its first `most` bytes or a little more), `length` bytes a read, following
    `nextOffset` as a client does."""
    offset, parts = 0, list[str]()
    for _ in range(1000):
        status, chunk = _log(system, job, task_id, stream=stream, offset=offset, length=length)
        assert status == 200, chunk
        assert chunk["offset"] == offset
        # Whole characters only: the next read starts right after the bytes of `data`.
        assert chunk["nextOffset"] == offset + len(chunk["data"].encode("utf-8"))
        if not chunk["data"] or offset >= most:
            return "".join(parts)
        parts.append(chunk["data"])
        offset = chunk["nextOffset"]
    raise AssertionError("the log never ended")


def _markers_app(system: System) -> None:
    src = system.tmp / "markers-src"
    (src / "markers").mkdir(parents=True)
    (src / "markers" / "__init__.py").write_text("")
    (src / "markers" / "jobs.py").write_text(JOBS_PY)
    archive = build_app_archive(src, system.tmp / "markers.tar.gz", python=sys.executable)
    _ok(
        system,
        "app",
        "add",
        "markers",
        "--url",
        archive.app_url,
        "--bootstrap",
        "bin/start.sh",
        "--cpu",
        "0.1",
        "--memory",
        "64",
    )


def test_each_runs_output_is_its_own_and_reads_through_the_api_and_the_cli(
    system: System,
) -> None:
    _markers_app(system)
    _ok(
        system,
        "job",
        "add",
        "shout",
        "--app",
        "markers",
        "--type",
        "SIMPLE",
        "--class",
        "markers.jobs:shout",
        "--execution",
        "TRANSIENT",
        "--cron",
        NEVER,
        "--shards",
        "2",
        "--cpu",
        "0.1",
        "--memory",
        "32",
    )
    _ok(system, "job", "trigger", "shout")
    _ended(system, "shout", 2)
    _ok(system, "job", "trigger", "shout")
    runs = _ended(system, "shout", 4)
    assert {r["result"] for r in runs} == {"success"}
    assert sorted(r["shardingItem"] for r in runs) == [0, 0, 1, 1]
    task_ids = [r["taskId"] for r in runs]

    for task_id in task_ids:
        out = _read_all(system, "shout", task_id, "stdout", 1_000_000)
        lines = out.splitlines()
        # Its own 200 lines, nothing of the three other runs.
        assert lines == [f"OUT {task_id} line {n} {MARK}" for n in range(200)]
        err = _read_all(system, "shout", task_id, "stderr", 1_000_000)
        assert f"ERR {task_id} {MARK}" in err
        assert "OUT " not in err
        assert not [t for t in task_ids if t != task_id and t in out + err]
        # Small reads cut characters in the middle: each is left whole for the next read.
        start = _read_all(system, "shout", task_id, "stdout", 7, most=300)
        assert len(start.encode()) >= 300 and out.startswith(start)
        status, size = _log(system, "shout", task_id, offset=-1)
        assert status == 200 and size["data"] == ""
        assert size["offset"] == size["nextOffset"] == len(out.encode("utf-8"))

    # The CLI, through the standby: the runs, then each stream of one run.
    table = _ok(system, "runs", "shout")
    assert all(task_id in table for task_id in task_ids)
    listed = json.loads(_ok(system, "runs", "shout", "--json"))
    assert sorted(r["taskId"] for r in listed["runs"]) == sorted(task_ids)
    one = task_ids[0]
    assert _ok(system, "logs", one).splitlines()[-1] == f"OUT {one} line 199 {MARK}"
    err = _ok(system, "logs", one, "--stderr")
    assert f"ERR {one} {MARK}\n" in err and "OUT " not in err
    missing = _cli(system, "logs", "shout@-@0@-@READY@-@S0@-@nosuch")
    assert missing.returncode == 4, (missing.stdout, missing.stderr)

    # The sandbox lookup: the app's executors, below each agent's work directory.
    status, boxes = system.api("GET", "/api/operate/sandbox?appName=markers")
    assert status == 200 and boxes
    for box in boxes:
        assert box["path"].startswith("/slaves/") and "/runs/" in box["path"]
        assert box["executorId"].startswith("markers@-@")


def _script_app(system: System) -> None:
    src = system.tmp / "scripty-src"
    src.mkdir()
    (src / "script.sh").write_text(SCRIPT_SH)
    archive = system.tmp / "scripty.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "script.sh", arcname="script.sh")
    app = {
        "appName": "scripty",
        "appURL": str(archive),
        "bootstrapScript": "true",
        "cpuCount": 0.1,
        "memoryMB": 32,
    }
    assert system.api("POST", "/api/app", app)[0] == 204


def _metrics(replica: ReplicaProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, _, body = http_get(f"http://{replica.identity}/metrics", timeout_s=10.0)
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_script_runs_have_execution_records_exit_statuses_logs_and_metrics(
    system: System,
) -> None:
    _script_app(system)
    job = {
        "jobName": "scripty",
        "appName": "scripty",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh script.sh",
        "cron": NEVER,
        "shardingTotalCount": 2,
        "cpuCount": 0.1,
        "memoryMB": 16,
    }
    assert system.api("POST", "/api/job/register", job)[0] == 204
    assert system.api("POST", "/api/job/trigger", raw="scripty")[0] == 204
    runs = {r["shardingItem"]: r for r in _ended(system, "scripty", 2)}
    assert runs[0]["result"] == "failure" and runs[0]["exitStatus"] == 3
    assert runs[0]["reason"] == "Command exited with status 3"
    assert runs[1]["result"] == "success" and runs[1]["exitStatus"] == 0
    for item, run in runs.items():
        assert run["startTime"] <= run["endTime"]
        out = _read_all(system, "scripty", run["taskId"], "stdout", 65536)
        assert out == f"script-out {item}\n"
        err = _read_all(system, "scripty", run["taskId"], "stderr", 65536)
        assert f"script-err {item}" in err

    # SCRIPT command tasks have execution records now, like the executor's runs.
    def executions() -> list[dict[str, Any]] | None:
        status, body = system.api("GET", "/api/job/events/executions?jobName=scripty")
        rows = body["rows"] if status == 200 else []
        return rows if len([r for r in rows if r.get("completeTime")]) == 2 else None

    rows = {r["shardingItem"]: r for r in wait_for(executions, 20, message="two records")}
    assert rows[0]["success"] is False
    assert rows[0]["failureCause"]["plainText"] == "Command exited with status 3"
    assert rows[1]["success"] is True

    # /metrics counts the job's runs by result, in Prometheus's own format.
    leader = system.leader()
    assert leader is not None
    samples = _metrics(leader)

    def runs_of(result: str) -> float:
        key = ("ejc_job_runs_total", (("job_name", "scripty"), ("result", result)))
        return samples.get(key, 0.0)

    assert (runs_of("success"), runs_of("failure"), runs_of("killed")) == (1, 1, 0)
    assert samples[("ejc_job_run_duration_seconds_count", (("job_name", "scripty"),))] == 2
    assert samples[("ejc_task_launches_total", (("type", "READY"),))] >= 2
    # The successful run's end at least was written by the status handler's batch path.
    assert samples[("ejc_status_updates_batched_total", ())] >= 1
    assert samples[("ejc_status_batch_fallbacks_total", ())] == 0
    assert samples[("ejc_replica_role", (("role", "leader"),))] == 1
    assert samples[("ejc_mesos_connected", ())] == 1
    standby = _metrics(_standby(system))
    assert standby[("ejc_replica_role", (("role", "standby"),))] == 1
    assert standby[("ejc_leader", ())] == 0

    # Deleting the job drops its series.
    assert system.api("DELETE", "/api/job/deregister", raw="scripty")[0] == 204
    wait_for(
        lambda: not [k for k in _metrics(leader) if ("job_name", "scripty") in k[1]],
        20,
        message="the job's series gone",
    )
