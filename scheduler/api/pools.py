"""`/api/pool` and `/api/pools` (issue 28): create, resize, read, list and delete concurrency
pools.

A pool is cluster-wide (its jobs may be in any app): writes need `editor` on every app (scope
`cluster`), reads any authenticated caller; the member jobs a read shows are those of the apps
the caller sees. Every body is checked whole before anything is written (`model/pools.py`);
the writes go to the term's `PoolStore` (fenced). A pool still named by a job cannot be deleted
(409 naming the jobs), nor resized below what one run of a member job takes (400 naming the
job): either would leave that job's runs waiting for ever. `inUse` and `waiting` are the
launcher's counts of its last round.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Flask, Response, current_app, jsonify

from scheduler.api.access_control import requires, visible
from scheduler.api.audit_hooks import note_change, note_resource
from scheduler.api.bodies import json_body
from scheduler.api.inputs import reference_name
from scheduler.api.paging import keyed_list
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import Conflict, InvalidRequest, NotFound
from scheduler.model.pools import PoolConfig, fit_problem
from scheduler.storage.pool_store import PoolStore

log = logging.getLogger(__name__)

bp = Blueprint("pools", __name__, url_prefix="/api")

_EXTENSION = "ejc_pools"
_NAMED_AT_MOST = 20
"""Jobs a refusal names (the rest are counted)."""


def install(app: Flask, pools: PoolStore, max_list_items: int) -> None:
    """Register the routes on `app`, serving the term's `pools`."""
    app.extensions[_EXTENSION] = (pools, max_list_items)
    app.register_blueprint(bp)


def _pools() -> PoolStore:
    found: tuple[PoolStore, int] = current_app.extensions[_EXTENSION]
    return found[0]


def _pool(name: str) -> PoolConfig:
    pool = _pools().get(reference_name(name, "poolName"))
    note_resource(f"pool/{name}")
    if pool is None:
        raise NotFound(f"pool '{name}' does not exist")
    return pool


def _members(name: str) -> list[JobConfig]:
    """The jobs that name the pool `name` (every job read, in bulk)."""
    config = term_access().config
    return [job for job in config.jobs_named(config.job_names()) if job.pool == name]


def _named(jobs: list[str]) -> str:
    shown = ", ".join(jobs[:_NAMED_AT_MOST])
    more = len(jobs) - _NAMED_AT_MOST
    return shown + (f" and {more} more" if more > 0 else "")


def _view(pool: PoolConfig, members: list[JobConfig] | None) -> dict[str, object]:
    counts = _pools().counts(pool.pool_name)
    out: dict[str, object] = {
        "poolName": pool.pool_name,
        "size": pool.size,
        "inUse": counts.in_use,
        "waiting": counts.waiting,
    }
    if members is not None:
        out["jobs"] = sorted(j.job_name for j in members if visible(j.app_name))
    return out


def _check_fits(pool: PoolConfig) -> None:
    """400 naming the member jobs one run of which the pool could not hold."""
    problems = {
        job.job_name: problem
        for job in _members(pool.pool_name)
        if (
            problem := fit_problem(
                job.sharding_total_count, job.pool_slots, pool.pool_name, pool.size
            )
        )
    }
    if problems:
        first = next(iter(problems))
        raise InvalidRequest(
            f"size {pool.size} is too small for job(s) {_named(sorted(problems))}: "
            f"job {first}: {problems[first]}",
            {"size": f"too small for job {first}: {problems[first]}"},
        )


@bp.post("/pool")
@requires(Role.EDITOR, scope="cluster")
def create() -> tuple[Response, int]:
    pool = PoolConfig.from_json(json_body())
    _pools().save(pool, create=True)
    note_change(f"pool/{pool.pool_name}", None, pool.to_json())
    log.info("api: pool %s created (size %s)", pool.pool_name, pool.size)
    return jsonify(_view(pool, [])), 201


def _update(expected: str | None) -> Response:
    pool = PoolConfig.from_json(json_body(), expected_name=expected)
    before = _pool(pool.pool_name)
    if pool.size < before.size:
        _check_fits(pool)
    _pools().save(pool, create=False)
    note_change(f"pool/{pool.pool_name}", before.to_json(), pool.to_json())
    log.info("api: pool %s resized %s -> %s", pool.pool_name, before.size, pool.size)
    return jsonify(_view(pool, None))


@bp.put("/pool")
@requires(Role.EDITOR, scope="cluster")
def update() -> Response:
    return _update(None)


@bp.put("/pool/<name>")
@requires(Role.EDITOR, scope="cluster")
def update_named(name: str) -> Response:
    return _update(reference_name(name, "poolName"))


@bp.get("/pool/<name>")
@requires(None, scope="authenticated")
def show(name: str) -> Response:
    pool = _pool(name)
    return jsonify(_view(pool, _members(pool.pool_name)))


@bp.get("/pools")
@requires(None, scope="authenticated")
def listing() -> Response:
    """Every pool by name with its counts, paged like the other lists."""
    pools, max_items = current_app.extensions[_EXTENSION]
    return keyed_list(
        "pools", pools.all(), lambda p: (p.pool_name,), lambda p: _view(p, None), max_items
    )


@bp.delete("/pool/<name>")
@requires(Role.EDITOR, scope="cluster")
def delete(name: str) -> Response:
    pool = _pool(name)
    users = sorted(job.job_name for job in _members(pool.pool_name))
    if users:
        raise Conflict(
            f"pool '{name}' is used by job(s) {_named(users)}: take them out of it first"
        )
    if not _pools().delete(pool.pool_name):
        raise NotFound(f"pool '{name}' does not exist")
    note_change(f"pool/{name}", pool.to_json(), None)
    log.info("api: pool %s deleted", name)
    return Response(status=204)
