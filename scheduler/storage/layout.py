"""The ZooKeeper layout: every path the scheduler reads or writes, and what each node holds.

The one module that spells a path. Paths are namespace-relative (a `Registry` puts them under
`/{zk_namespace}`); the first block is Elastic-Job-Cloud 2.1.5's layout (DESIGN.md section 4),
the rest is this scheduler's own. A new feature adds its paths here, and every other module asks
for them by name. The codecs turn a node's bytes into a value and back; a decoder never raises:
what another writer left unreadable reads as the empty value (a count of 0, no back-off, no
fire), as the original's readers did.

Standard library and models only: no kazoo, no registry.
"""

from __future__ import annotations

import json

from scheduler.model.task_id import DELIMITER

# -- Elastic-Job-Cloud 2.1.5's layout ------------------------------------------------------------

APPS = "/config/app"
"""`/config/app/{app}`: the app's JSON."""
JOBS = "/config/job"
"""`/config/job/{job}`: the job's JSON."""
READY = "/state/ready"
"""`/state/ready/{job}`: the job's pending runs (`encode_count`)."""
RUNNING = "/state/running"
"""`/state/running/{job}/{taskId}`: a launched task's JSON (`state.RunningTask`)."""
FAILOVER = "/state/failover"
"""`/state/failover/{job}/{job@-@item}`: the original task id of a shard to relaunch."""
DISABLE_APP = "/state/disable/app"
"""`/state/disable/app/{app}`: present while the app is disabled."""
DISABLE_JOB = "/state/disable/job"
"""`/state/disable/job/{job}`: present while the job is disabled."""
ELECTION = "/ha/election"
"""The election's members; each node's data is its replica's `host:port`."""
FRAMEWORK_ID = "/ha/framework_id"
"""The Mesos framework id, kept across leaders."""

# -- this scheduler's own -------------------------------------------------------------------------

FAILOVER_BACKOFF = "/state/failover_backoff"
"""`/state/failover_backoff/{job}/{item}`: a shard's failures in a row (`encode_backoff`)."""
LAST_FIRE = "/state/last_fire"
"""`/state/last_fire/{job}`: the newest cron fire accounted for (`encode_fire_time`)."""
RESULTS = "/statistics/results"
"""`/statistics/results/{yyyyMMddHHmm}/{uuid}-{s|f}`: task results waiting for the database."""
TERMS = "/ha/terms"
"""`/ha/terms/{term:010d}`: each term's record (JSON)."""
ACL_MARKER = "/ha/acl_secured"
"""Present (with the digest's ACL) once a walk secured every node of the namespace."""
REVOKED_SESSIONS = "/auth/revoked_sessions"
"""`/auth/revoked_sessions/{expiresAtMs}-{id}`: console sessions logged out; the folder's data
is the time (epoch ms) before which every session is revoked."""

ACCESS_USERS = "/access/users"
"""`/access/users/{name}`: a user of the access records (`model/access/records.encode_user`)."""
ACCESS_GRANTS = "/access/grants"
"""`/access/grants/{id}`: a grant (`encode_grant`)."""
ACCESS_TOKENS = "/access/tokens"
"""`/access/tokens/{id}`: an API token's record, its secret as a digest (`encode_token`)."""
ACCESS_TOKENS_USED = "/access/tokens_used"
"""`/access/tokens_used/{id}`: when the token was last used (epoch ms, `encode_count`), written
by the leader at most once a minute per token."""


def access_user_path(name: str) -> str:
    return f"{ACCESS_USERS}/{name}"


def access_grant_path(grant_id: str) -> str:
    return f"{ACCESS_GRANTS}/{grant_id}"


def access_token_path(token_id: str) -> str:
    return f"{ACCESS_TOKENS}/{token_id}"


def access_token_used_path(token_id: str) -> str:
    return f"{ACCESS_TOKENS_USED}/{token_id}"


WORKFLOWS = "/workflows/config"
"""`/workflows/config/{workflow}`: a workflow's definition (`WorkflowConfig.to_json`)."""
WORKFLOWS_DISABLED = "/workflows/disabled"
"""`/workflows/disabled/{workflow}`: present while the workflow is disabled (no cron fires)."""
WORKFLOW_LAST_FIRE = "/workflows/last_fire"
"""`/workflows/last_fire/{workflow}`: its newest cron fire accounted for (`encode_fire_time`)."""
WORKFLOW_RUNS = "/workflows/runs"
"""`/workflows/runs/{workflow}/{runId}`: a run's state with its definition snapshot (JSON)."""
WORKFLOW_ACTIVE = "/workflows/active"
"""`/workflows/active/{runId}`: present while the run is running (the runs a leader resumes)."""
WORKFLOW_QUEUE = "/workflows/queue"
"""`/workflows/queue/{job}/{fireKey}`: a workflow node's fire waiting for its launch (JSON)."""
WORKFLOW_FIRES = "/workflows/fires"
"""`/workflows/fires/{fireKey}`: a node fire's shards: how many, which ended how (JSON)."""
WORKFLOW_TASKS = "/workflows/tasks"
"""`/workflows/tasks/{taskId}`: the node fire a launched task belongs to (its fire key)."""


def workflow_path(name: str) -> str:
    return f"{WORKFLOWS}/{name}"


def workflow_disabled_path(name: str) -> str:
    return f"{WORKFLOWS_DISABLED}/{name}"


def workflow_last_fire_path(name: str) -> str:
    return f"{WORKFLOW_LAST_FIRE}/{name}"


def workflow_runs_folder(name: str) -> str:
    return f"{WORKFLOW_RUNS}/{name}"


def workflow_run_path(name: str, run_id: str) -> str:
    return f"{WORKFLOW_RUNS}/{name}/{run_id}"


def workflow_active_path(run_id: str) -> str:
    return f"{WORKFLOW_ACTIVE}/{run_id}"


def workflow_queue_folder(job: str) -> str:
    return f"{WORKFLOW_QUEUE}/{job}"


def workflow_queue_path(job: str, fire_key: str) -> str:
    return f"{WORKFLOW_QUEUE}/{job}/{fire_key}"


def workflow_fire_path(fire_key: str) -> str:
    return f"{WORKFLOW_FIRES}/{fire_key}"


def workflow_task_path(task_id: str) -> str:
    return f"{WORKFLOW_TASKS}/{task_id}"


CALENDARS = "/calendars"
"""`/calendars/{name}`: a calendar of excluded periods (issue 28; `Calendar.to_json`)."""
POOLS = "/pools"
"""`/pools/{name}`: a concurrency pool (issue 28; `PoolConfig.to_json`)."""
BACKFILLS = "/backfills"
"""`/backfills/{job}/{backfillId}`: a backfill's state (issue 28; `Backfill.to_json`). Its fires
are launched as node fires (`WORKFLOW_QUEUE`, `WORKFLOW_FIRES`, `WORKFLOW_TASKS`) whose
`backfillId` names it."""


def calendar_path(name: str) -> str:
    return f"{CALENDARS}/{name}"


def pool_path(name: str) -> str:
    return f"{POOLS}/{name}"


def backfill_folder(job: str) -> str:
    return f"{BACKFILLS}/{job}"


def backfill_path(job: str, backfill_id: str) -> str:
    return f"{BACKFILLS}/{job}/{backfill_id}"


BACKFILLS_ACTIVE = "/backfill-active"
"""`/backfill-active/{job}~{backfillId}`: present while the backfill is RUNNING or PAUSED (the
quota `max_active_backfills` counts them; a new leader resumes them). Written in the same
transaction as the state's status."""


def backfill_active_path(job: str, backfill_id: str) -> str:
    return f"{BACKFILLS_ACTIVE}/{job}~{backfill_id}"


def backfill_outcome_path(job: str, backfill_id: str) -> str:
    """Under the backfill's state: `{"succeeded": N, "failed": M}`, its fires that ended,
    counted in the transaction that deletes each one's fire record."""
    return f"{BACKFILLS}/{job}/{backfill_id}/outcome"


WORKFLOW_BACKFILLS = "/workflows/backfills"
"""`/workflows/backfills/{workflow}/{backfillId}`: a workflow's backfill (issue 28), the same
state as a job's (`Backfill.to_json`, its `jobName` the workflow's name) with its outcome under
it; each fire is a workflow run (`WORKFLOW_RUNS`) created with the state's advance."""
WORKFLOW_BACKFILLS_ACTIVE = "/workflows/backfill-active"
"""`/workflows/backfill-active/{workflow}~{backfillId}`: present while a workflow's backfill is
RUNNING or PAUSED (`max_active_backfills` counts these with `BACKFILLS_ACTIVE`)."""


def workflow_backfill_folder(workflow: str) -> str:
    return f"{WORKFLOW_BACKFILLS}/{workflow}"


def workflow_backfill_path(workflow: str, backfill_id: str) -> str:
    return f"{WORKFLOW_BACKFILLS}/{workflow}/{backfill_id}"


def workflow_backfill_active_path(workflow: str, backfill_id: str) -> str:
    return f"{WORKFLOW_BACKFILLS_ACTIVE}/{workflow}~{backfill_id}"


def workflow_backfill_outcome_path(workflow: str, backfill_id: str) -> str:
    return f"{WORKFLOW_BACKFILLS}/{workflow}/{backfill_id}/outcome"


# The roots a term's view of the queues watches (a child watch needs the node).
QUEUE_ROOTS = (READY, FAILOVER, RUNNING, DISABLE_JOB, DISABLE_APP)


def app_path(app: str) -> str:
    return f"{APPS}/{app}"


def job_path(job: str) -> str:
    return f"{JOBS}/{job}"


def ready_path(job: str) -> str:
    return f"{READY}/{job}"


def running_folder(job: str) -> str:
    return f"{RUNNING}/{job}"


def running_path(job: str, task_id: str) -> str:
    return f"{RUNNING}/{job}/{task_id}"


def failover_folder(job: str) -> str:
    return f"{FAILOVER}/{job}"


def failover_key(job: str, item: int) -> str:
    """The name of a shard's failover node: `{job}@-@{item}`."""
    return f"{job}{DELIMITER}{item}"


def failover_path(job: str, item: int) -> str:
    return f"{FAILOVER}/{job}/{failover_key(job, item)}"


def failover_item(key: str) -> int | None:
    """The shard item of failover node name `key`; None when it names none."""
    item = key.rsplit(DELIMITER, 1)[-1]
    return int(item) if item.isdigit() else None


def backoff_folder(job: str) -> str:
    return f"{FAILOVER_BACKOFF}/{job}"


def backoff_path(job: str, item: int) -> str:
    return f"{FAILOVER_BACKOFF}/{job}/{item}"


def last_fire_path(job: str) -> str:
    return f"{LAST_FIRE}/{job}"


def disable_path(base: str, name: str) -> str:
    """`base` is DISABLE_APP or DISABLE_JOB."""
    return f"{base}/{name}"


def result_bucket_path(bucket: str) -> str:
    """A result journal's bucket: `bucket` is a UTC minute, `yyyyMMddHHmm`."""
    return f"{RESULTS}/{bucket}"


def result_path(bucket: str, success: bool, unique: str) -> str:
    """One journaled result: `{unique}-s` for a success, `{unique}-f` for a failure."""
    return f"{RESULTS}/{bucket}/{unique}-{'s' if success else 'f'}"


def result_succeeded(name: str) -> bool:
    """Whether the journaled result named `name` (`result_path`'s last part) is a success."""
    return name.endswith("-s")


def term_path(term: int) -> str:
    return f"{TERMS}/{term:010d}"


# -- codecs ------------------------------------------------------------------------------------


def decode_count(data: bytes | None) -> int:
    """A ready node's pending runs (a decimal count, as the original wrote it); 0 for none or
    for data that is no count."""
    try:
        return max(0, int((data or b"0").decode().strip() or 0))
    except (UnicodeDecodeError, ValueError):
        return 0


def encode_count(count: int) -> bytes:
    return str(count).encode()


def decode_backoff(data: bytes | None) -> tuple[int, float]:
    """(failures, notBefore) of a back-off node; (0, 0.0) for none or unreadable data."""
    try:
        doc = json.loads(data) if data else {}
        return int(doc.get("failures", 0)), float(doc.get("notBefore", 0.0))
    except (ValueError, TypeError, AttributeError):
        return 0, 0.0


def encode_backoff(failures: int, not_before: float) -> bytes:
    return json.dumps({"failures": failures, "notBefore": not_before}).encode()


def decode_fire_time(data: bytes | None) -> float | None:
    """A last-fire record's epoch seconds; None for none or unreadable data."""
    try:
        return float(data) if data else None
    except ValueError:
        return None


def encode_fire_time(when: float) -> bytes:
    return f"{when:.3f}".encode()
