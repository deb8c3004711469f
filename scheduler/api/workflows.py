"""`/api/workflow` and `/api/workflows` (issue 27): register, update, read, list, delete,
trigger, enable/disable workflows; list and read their runs; cancel, retry and mark-success.

A workflow belongs to an app (`appName` in the body): registering, updating and deleting it
need `editor` there, and every node's job must be one the caller sees (a job of an app the
caller cannot see is an unknown job, the same 400 as one that does not exist); triggering,
enabling, disabling and the run operations need `operator`; reads need `viewer`; the list holds
only the workflows of the apps the caller sees. Every input is checked and bounded before
anything is written (`model/workflow/definition.py`); the run operations go to the term's
workflow engine (`leader/workflows`), whose writes are fenced compare-and-sets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request

from scheduler.api.access_control import require_app, requires, visible
from scheduler.api.audit_hooks import note_change, note_resource
from scheduler.api.bodies import json_body
from scheduler.api.inputs import reference_name
from scheduler.api.paging import encode_cursor, keyed_list, page_asked
from scheduler.api.term_access import term_access
from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.access.roles import Role
from scheduler.model.config import PARAMETER_MAX_BYTES
from scheduler.model.config._wire import require_object, text_problem
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded
from scheduler.model.workflow import WorkflowConfig, WorkflowRun, parse_run_id
from scheduler.replica.term import LeaderContext
from scheduler.storage.term_stores import TermStores
from scheduler.storage.workflow_store import WorkflowQueue, WorkflowStore

log = logging.getLogger(__name__)

bp = Blueprint("workflows", __name__, url_prefix="/api")

RUNS_PAGE_DEFAULT = 20
_EXTENSION = "ejc_workflows"


@dataclass(frozen=True)
class WorkflowAccess:
    """What the handlers use: the term's workflow store, its engine and the settings' bounds."""

    store: WorkflowStore
    engine: WorkflowEngine
    max_workflows: int
    max_list_items: int
    calendar_exists: Callable[[str], bool] = lambda _name: False
    """Whether a calendar exists (the term's calendar store): `excludeCalendars` names only
    existing calendars (issue 28), as a job's must."""


def workflow_access(
    ctx: LeaderContext, stores: TermStores, engine: WorkflowEngine | None
) -> WorkflowAccess:
    """The handlers' access for the term of `ctx`: its engine (None, as in API tests: one
    built here over the term's stores, never started, so that the operations work and no run
    advances)."""
    settings = ctx.settings
    if engine is None:
        engine = WorkflowEngine(
            WorkflowStore(
                stores.registry,
                stores.fence,
                stores.config.default_time_zone,
                settings.max_workflow_nodes,
            ),
            stores,
            ctx.term,
            WorkflowQueue(),
            kill=lambda _task_id: False,
            calendars=stores.calendars,
            max_active_backfills=settings.max_active_backfills,
        )
    calendars = stores.calendars
    return WorkflowAccess(
        engine.store,
        engine,
        settings.max_jobs,
        settings.max_list_items,
        calendar_exists=lambda name: calendars.get(name) is not None,
    )


def install(app: Flask, access: WorkflowAccess) -> None:
    """Register the routes on `app`, serving `access`."""
    app.extensions[_EXTENSION] = access
    app.register_blueprint(bp)


def _access() -> WorkflowAccess:
    found: WorkflowAccess = current_app.extensions[_EXTENSION]
    return found


def _name(name: str, field: str = "workflowName") -> str:
    return reference_name(name, field)


def _workflow(role: Role, name: str) -> WorkflowConfig:
    """The workflow if the caller holds `role` on its app; 404 (as for one that does not
    exist) when its app is invisible to the caller."""
    config = _access().store.get(_name(name))
    if config is None or not visible(config.app_name):
        if config is not None:
            note_resource(f"workflow/{name}", config.app_name)
            g.access_refusal = "hidden"
        raise NotFound(f"workflow '{name}' does not exist")
    require_app(role, config.app_name)
    note_resource(f"workflow/{name}", config.app_name)
    return config


def _view(config: WorkflowConfig, disabled: bool) -> dict[str, object]:
    return {**config.to_json(), "enabled": not disabled}


def _read_body(*, create: bool) -> WorkflowConfig:
    """The body checked whole: the workflow's fields and graph, its app (the caller must be an
    editor there), its jobs (each must exist in an app the caller sees) and its calendars (each
    must exist)."""
    access = _access()
    data = require_object(json_body(), "a workflow")
    app_name = data.get("appName")
    if isinstance(app_name, str) and app_name:
        require_app(Role.EDITOR, app_name)
    config_store = term_access().config

    def job_visible(job_name: str) -> bool:
        job = config_store.job(job_name)
        return job is not None and visible(job.app_name)

    config = WorkflowConfig.from_json(
        data,
        max_nodes=access.store.max_nodes,
        default_time_zone=access.store.default_time_zone,
        job_exists=job_visible,
        calendar_exists=access.calendar_exists,
    )
    if not config_store.app_exists(config.app_name):
        raise InvalidRequest(
            f"app '{config.app_name}' does not exist",
            {"appName": f"app '{config.app_name}' does not exist"},
        )
    if create and access.store.count() >= access.max_workflows:
        raise QuotaExceeded(
            "max_jobs",
            f"at most {access.max_workflows} workflows may be registered (max_jobs)",
        )
    return config


@bp.post("/workflow")
@requires(Role.EDITOR, scope="app")
def register() -> tuple[Response, int]:
    access = _access()
    config = _read_body(create=True)
    access.store.save(config, create=True)
    note_change(f"workflow/{config.workflow_name}", None, config.to_json(), config.app_name)
    access.engine.definitions_changed()
    log.info("api: workflow %s registered", config.workflow_name)
    return jsonify(_view(config, False)), 201


@bp.put("/workflow")
@requires(Role.EDITOR, scope="app")
def update() -> Response:
    access = _access()
    config = _read_body(create=False)
    before = _workflow(Role.EDITOR, config.workflow_name)
    if before.app_name != config.app_name:
        # Moving a workflow between apps would let an editor of one take it from another.
        raise InvalidRequest(
            "a workflow's app cannot change; delete it and register it again",
            {"appName": f"is {before.app_name}"},
        )
    access.store.save(config, create=False)
    note_change(
        f"workflow/{config.workflow_name}", before.to_json(), config.to_json(), config.app_name
    )
    access.engine.definitions_changed()
    log.info("api: workflow %s updated (runs in flight keep their snapshot)", config.workflow_name)
    return jsonify(_view(config, access.store.is_disabled(config.workflow_name)))


@bp.get("/workflow/<name>")
@requires(Role.VIEWER, scope="app")
def show(name: str) -> Response:
    config = _workflow(Role.VIEWER, name)
    return jsonify(_view(config, _access().store.is_disabled(config.workflow_name)))


@bp.get("/workflows")
@requires(Role.VIEWER, scope="list")
def listing() -> Response:
    """Every workflow of the apps the caller sees, by name; `?job=NAME` keeps those with a node
    that runs the job (the console's job page)."""
    access = _access()
    job = request.args.get("job")
    if job is not None:
        job = reference_name(job, "job")
    disabled = access.store.disabled_names()
    configs = [
        c for c in access.store.all() if visible(c.app_name) and (job is None or job in c.jobs)
    ]
    return keyed_list(
        "workflows",
        configs,
        lambda c: (c.workflow_name,),
        lambda c: _view(c, c.workflow_name in disabled),
        access.max_list_items,
    )


@bp.delete("/workflow/<name>")
@requires(Role.EDITOR, scope="app")
def delete(name: str) -> Response:
    """Delete the definition; its runs in flight are cancelled (their running nodes' tasks
    killed) by the engine, its ended runs deleted."""
    access = _access()
    config = _workflow(Role.EDITOR, name)
    access.store.delete(config.workflow_name)
    access.store.delete_runs(config.workflow_name)
    note_change(f"workflow/{name}", config.to_json(), None, config.app_name)
    access.engine.definitions_changed()
    log.info("api: workflow %s deleted", name)
    return Response(status=204)


@bp.post("/workflow/<name>/disable")
@requires(Role.OPERATOR, scope="app")
def disable(name: str) -> Response:
    access = _access()
    config = _workflow(Role.OPERATOR, name)
    access.store.disable(config.workflow_name)
    note_change(f"workflow/{name}", {"enabled": True}, {"enabled": False}, config.app_name)
    access.engine.definitions_changed()
    return Response(status=204)


@bp.post("/workflow/<name>/enable")
@requires(Role.OPERATOR, scope="app")
def enable(name: str) -> Response:
    access = _access()
    config = _workflow(Role.OPERATOR, name)
    access.store.enable(config.workflow_name)
    note_change(f"workflow/{name}", {"enabled": False}, {"enabled": True}, config.app_name)
    access.engine.definitions_changed()
    return Response(status=204)


@bp.post("/workflow/<name>/trigger")
@requires(Role.OPERATOR, scope="app")
def trigger(name: str) -> tuple[Response, int]:
    """A run now. The optional body `{"parameter": "..."}` is every node's shards' job
    parameter instead of their jobs' own."""
    config = _workflow(Role.OPERATOR, name)
    parameter = _trigger_parameter()
    run = _access().engine.trigger(config.workflow_name, parameter)
    note_change(f"workflow/{name}", None, {"runId": run.run_id}, config.app_name)
    return jsonify({"runId": run.run_id}), 201


def _trigger_parameter() -> str | None:
    if not request.get_data(cache=True).strip():
        return None
    data = require_object(json_body(), "a trigger")
    unknown = [key for key in data if key != "parameter"][:5]
    if unknown:
        raise InvalidRequest(
            "unknown field(s) of a trigger: " + ", ".join(repr(k)[:40] for k in unknown),
            dict.fromkeys((str(k)[:40] for k in unknown), "is not a field of a trigger"),
        )
    parameter = data.get("parameter")
    if parameter is None:
        return None
    if not isinstance(parameter, str):
        raise InvalidRequest("parameter must be a string", {"parameter": "must be a string"})
    if (problem := text_problem(parameter, PARAMETER_MAX_BYTES)) is not None:
        raise InvalidRequest(f"parameter {problem}", {"parameter": problem})
    return parameter


@bp.get("/workflow/<name>/runs")
@requires(Role.VIEWER, scope="app")
def runs(name: str) -> Response:
    """The workflow's runs, newest first, paged (`?limit=N&cursor=C`, 20 by default)."""
    access = _access()
    config = _workflow(Role.VIEWER, name)
    kind = f"workflow-runs:{config.workflow_name}"
    page = page_asked(kind)
    limit = RUNS_PAGE_DEFAULT if page is None else page.limit
    ids = access.store.run_ids(config.workflow_name)
    if page is not None and page.after is not None:
        ids = [r for r in ids if r < page.after[0]]
    chosen = ids[:limit]
    found = access.store.runs(config.workflow_name, chosen)
    next_cursor = encode_cursor(kind, [chosen[-1]]) if len(ids) > limit and chosen else None
    return jsonify({"items": [r.summary_json() for r in found], "nextCursor": next_cursor})


def _run_id(name: str, run_id: str) -> str:
    if len(run_id) > 200:
        raise InvalidRequest("runId is too long", {"runId": "at most 200 characters"})
    workflow, _fire = parse_run_id(run_id)
    if workflow != name:
        raise NotFound(f"workflow '{name}' has no run '{run_id[:200]}'")
    return run_id


@bp.get("/workflow/<name>/runs/<run_id>")
@requires(Role.VIEWER, scope="app")
def run(name: str, run_id: str) -> Response:
    config = _workflow(Role.VIEWER, name)
    got = _access().store.run(config.workflow_name, _run_id(name, run_id))
    if got is None:
        raise NotFound(f"workflow '{name}' has no run '{run_id}'")
    return jsonify(got[0].to_json())


def _operate(
    name: str, run_id: str, what: str, act: Callable[[WorkflowEngine, str], WorkflowRun]
) -> Response:
    config = _workflow(Role.OPERATOR, name)
    checked = _run_id(name, run_id)
    before = _access().store.run(config.workflow_name, checked)
    if before is None:
        raise NotFound(f"workflow '{name}' has no run '{run_id}'")
    after = act(_access().engine, checked)
    note_change(
        f"workflow/{name}/run/{checked}",
        {"state": before[0].state.value},
        {"state": after.state.value, "operation": what},
        config.app_name,
    )
    log.info("api: workflow %s run %s: %s", name, checked, what)
    return jsonify(after.to_json())


@bp.post("/workflow/<name>/runs/<run_id>/cancel")
@requires(Role.OPERATOR, scope="app")
def cancel(name: str, run_id: str) -> Response:
    def act(engine: WorkflowEngine, checked: str) -> WorkflowRun:
        current = _access().store.run(name, checked)
        if current is not None and current[0].ended:
            raise Conflict(f"run {checked} has ended ({current[0].state.value})")
        return engine.cancel(name, checked)

    return _operate(name, run_id, "cancel", act)


@bp.post("/workflow/<name>/runs/<run_id>/retry")
@requires(Role.OPERATOR, scope="app")
def retry(name: str, run_id: str) -> Response:
    return _operate(name, run_id, "retry", lambda engine, checked: engine.retry(name, checked))


@bp.post("/workflow/<name>/runs/<run_id>/nodes/<node>/mark-success")
@requires(Role.OPERATOR, scope="app")
def mark_success(name: str, run_id: str, node: str) -> Response:
    node_name = reference_name(node, "node")
    return _operate(
        name,
        run_id,
        f"mark-success {node_name}",
        lambda engine, checked: engine.mark_success(name, checked, node_name),
    )
