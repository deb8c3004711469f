"""`/api/workflow/{name}/backfill` and `/api/workflow/{name}/backfills` (issue 28): run a
workflow's past cron fires, each as one workflow run.

- `POST /api/workflow/{name}/backfill` `{"from", "to", "firesPerMinute"?, "dryRun"?,
  "overlapPolicy"?}` (checked by `BackfillRequest.from_json`, as a job's): the workflow's cron
  fires in `[from, to]` in its zone, those its `excludeCalendars` exclude left out and counted,
  at most `max_backfill_fires` (400 naming count and cap). A dry run writes nothing (200, the
  preview); else the backfill is recorded RUNNING (201, its summary) and the workflow engine
  makes one run per fire (`leader/workflows/backfills.py`).
- `GET /api/workflow/{name}/backfills` (newest first) and `.../backfills/{id}`: each backfill's
  summary with its outcome (`succeeded`, `failed`: its runs that ended; `hadRun`: fires that
  had a run already, not run again).
- `POST /api/workflow/{name}/backfills/{id}/pause|resume|cancel` (cancel's optional body
  `{"killRunning": true}` cancels its runs still running).

The view names the workflow (`workflowName`) instead of the stored state's `jobName`. Roles as
the workflow's run operations: `operator` on its app to change, `viewer` to read (an invisible
app's workflow is a 404). Every change is audited.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from flask import Blueprint, Flask, Response, jsonify

from scheduler.api import backfills as job_backfills
from scheduler.api import workflows
from scheduler.api.access_control import requires
from scheduler.api.bodies import json_body
from scheduler.leader.workflows.backfills import WorkflowBackfills
from scheduler.model.access.roles import Role
from scheduler.model.backfill import (
    Backfill,
    BackfillRequest,
    FireList,
    preview_json,
)
from scheduler.model.errors import InvalidRequest
from scheduler.model.workflow import WorkflowConfig
from scheduler.storage.backfill_store import Outcome

log = logging.getLogger(__name__)

bp = Blueprint("workflow_backfills", __name__, url_prefix="/api")


def install(app: Flask) -> None:
    """Register the routes on `app` (after `workflows.install` and `backfills.install`, whose
    access they use)."""
    app.register_blueprint(bp)


def _backfills() -> WorkflowBackfills:
    return workflows._access().engine.backfills


def _view(backfill: Backfill, outcome: Outcome) -> dict[str, object]:
    body = backfill.summary_json()
    body["workflowName"] = body.pop("jobName")
    return {
        **body,
        "succeeded": outcome.succeeded,
        "failed": outcome.failed,
        "hadRun": outcome.had_run,
    }


def _fires_of(config: WorkflowConfig, checked: BackfillRequest) -> FireList:
    """The fires of the workflow's cron in the request's range, its calendars' exclusions
    applied."""
    spec = config.cron_spec(workflows._access().store.default_time_zone)
    if spec is None:
        why = "the workflow has no cron (it runs when triggered): no fires to backfill"
        raise InvalidRequest(f"workflow '{config.workflow_name}': {why}", {"workflowName": why})
    return job_backfills.fires_in(spec, config.exclude_calendars, checked)


@bp.post("/workflow/<name>/backfill")
@requires(Role.OPERATOR, scope="app")
def create(name: str) -> tuple[Response, int]:
    config = workflows._workflow(Role.OPERATOR, name)
    checked = BackfillRequest.from_json(json_body(), now=datetime.now(UTC))
    fires = _fires_of(config, checked)
    if checked.dry_run:
        return jsonify(preview_json(fires)), 200
    backfill = _backfills().create(config, checked, fires)
    resource = f"workflow/{config.workflow_name}/backfill/{backfill.backfill_id}"
    job_backfills.note_created(resource, backfill, config.app_name)
    return jsonify(_view(backfill, Outcome())), 201


@bp.get("/workflow/<name>/backfills")
@requires(Role.VIEWER, scope="app")
def listing(name: str) -> Response:
    """The workflow's backfills, newest first (at most `ENDED_KEPT` ended ones are kept)."""
    config = workflows._workflow(Role.VIEWER, name)
    return job_backfills.listed(_backfills().store, config.workflow_name, _view)


@bp.get("/workflow/<name>/backfills/<backfill_id>")
@requires(Role.VIEWER, scope="app")
def show(name: str, backfill_id: str) -> Response:
    config = workflows._workflow(Role.VIEWER, name)
    checked = job_backfills.checked_backfill_id(backfill_id)
    store = _backfills().store
    found = job_backfills.stored(store, config.workflow_name, "workflow", checked)
    return jsonify(_view(found, store.outcome(config.workflow_name, checked)))


def _operate(name: str, backfill_id: str, what: str) -> Response:
    config = workflows._workflow(Role.OPERATOR, name)
    checked = job_backfills.checked_backfill_id(backfill_id)
    kill_running = job_backfills.kill_running_asked() if what == "cancel" else False
    engine = _backfills()
    workflow = config.workflow_name
    before = job_backfills.stored(engine.store, workflow, "workflow", checked)
    if what == "pause":
        after = engine.pause(workflow, checked)
    elif what == "resume":
        after = engine.resume(workflow, checked)
    else:
        after = engine.cancel(workflow, checked, kill_running=kill_running)
    resource = f"workflow/{workflow}/backfill/{checked}"
    job_backfills.note_operated(resource, before, after, what, kill_running, config.app_name)
    log.info("api: backfill %s of workflow %s: %s", checked, workflow, what)
    return jsonify(_view(after, engine.store.outcome(workflow, checked)))


@bp.post("/workflow/<name>/backfills/<backfill_id>/pause")
@requires(Role.OPERATOR, scope="app")
def pause(name: str, backfill_id: str) -> Response:
    return _operate(name, backfill_id, "pause")


@bp.post("/workflow/<name>/backfills/<backfill_id>/resume")
@requires(Role.OPERATOR, scope="app")
def resume(name: str, backfill_id: str) -> Response:
    return _operate(name, backfill_id, "resume")


@bp.post("/workflow/<name>/backfills/<backfill_id>/cancel")
@requires(Role.OPERATOR, scope="app")
def cancel(name: str, backfill_id: str) -> Response:
    return _operate(name, backfill_id, "cancel")
