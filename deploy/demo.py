"""The demo of `./dev.sh run`: examples/demo_app and a job `demo_job`, through the REST API."""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["install_demo"]

DEMO_DIR = Path(__file__).resolve().parents[1] / "examples" / "demo_app"
_AUTH = "Basic " + base64.b64encode(b"root:root").decode()
_REGISTER_WITHIN_S = 60.0


def _api(address: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON body or None); status 0 when the replica could not be reached."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    req.add_header("Authorization", _AUTH)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return int(resp.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except (OSError, ValueError):
        return 0, None


def install_demo(leader: str, data_dir: Path) -> str:
    """Package examples/demo_app into `data_dir` and register it with a SIMPLE job (3 shards,
    every 5 s) on the leader at `leader`, unless an earlier run did (an app or job that exists
    is left as it is). Returns the banner line: the job as it is now, or what went wrong.

    Blocks on HTTP calls (10 s each at most; a registration unanswered is asked again for up
    to a minute).
    """
    from executor.package import build_app_archive

    archive = build_app_archive(DEMO_DIR, data_dir / "demo_app.tar.gz", python=sys.executable)
    app = {
        "appName": "demo_app",
        "appURL": archive.app_url,
        "bootstrapScript": "bin/start.sh",
        "cpuCount": 0.1,
        "memoryMB": 64,
        "appCacheEnable": False,
    }
    job = {
        "jobName": "demo_job",
        "appName": "demo_app",
        "jobType": "SIMPLE",
        "jobClass": "demo.jobs:hello",
        "jobExecutionType": "TRANSIENT",
        "cron": "0/5 * * * * ?",
        "shardingTotalCount": 3,
        "shardingItemParameters": "0=red,1=green,2=blue",
        "cpuCount": 0.1,
        "memoryMB": 32,
        "failover": True,
    }
    for path, body in (("/api/app", app), ("/api/job/register", job)):
        # A leader just elected on a loaded machine may not answer at once: asked again (a
        # registration that went through answers 409 then) for up to a minute.
        deadline = time.monotonic() + _REGISTER_WITHIN_S
        status, _ = _api(leader, "POST", path, body)
        while status in (0, 503) and time.monotonic() < deadline:
            time.sleep(1.0)
            status, _ = _api(leader, "POST", path, body)
        if status not in (204, 409):  # 409: already there from an earlier run
            return f"demo          not registered: POST {path} answered {status or 'nothing'}"
    status, now = _api(leader, "GET", "/api/job/jobs/demo_job")
    _, disabled = _api(leader, "GET", "/api/job/demo_job/disable")
    if status != 200 or not isinstance(now, dict):
        return f"demo          app demo_app ({archive.path}), job demo_job unreadable ({status})"
    return (
        f"demo          app demo_app ({archive.path}), job demo_job: "
        f"{now.get('jobExecutionType')} {now.get('jobType')}, "
        f"{now.get('shardingTotalCount')} shards, cron {now.get('cron')}, "
        f"{'disabled' if disabled else 'enabled'}"
    )
