"""A workflow run's state and the pure step that moves it (issue 27).

A run is keyed by its workflow and its fire time (`run_id`) and carries a snapshot of the
definition, so editing or deleting the workflow never changes a run in flight. Its state is a
value: `step(run, event)` returns the new run with the nodes to launch now and the nodes whose
tasks to kill; the engine writes the new run with a fenced compare-and-set in the same
transaction as the launches, so a step is applied once or not at all.

The rules, every node by its parents (a root node is ready at the start):
- a node is **ready** when every parent has ended and its condition holds (`on_success`: every
  parent succeeded; `on_failure`: some parent failed; `on_done`: always); it is launched (state
  running, its `attempt` one more) in the step that makes it ready;
- a node is **skipped** as soon as its condition can no longer hold (`on_success`: a parent
  failed, was skipped or cancelled; `on_failure`: every parent ended and none failed), and so,
  in the same step, are the descendants that needed it;
- with `failFast`, a node's failure cancels the running nodes and skips the pending ones;
- a cancel or a timeout does the same (the run ends `cancelled` or `timed_out`);
- the run ends when no node is pending or running: `failed` when a node failed (or was
  cancelled by failFast), else `succeeded`;
- retry (of an ended run) sets its failed, skipped and cancelled nodes pending again (a node that
  succeeded never runs again); mark-success of a failed, skipped or cancelled node counts it as
  succeeded and lets its children go on (the skipped nodes are looked at again).
An event that comes late (the end of a node's earlier attempt, of a node no longer running) is
ignored: the step returns the run unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from scheduler.model.errors import Conflict, InvalidRequest, NotFound
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.workflow.definition import Condition, WorkflowConfig

__all__ = [
    "MAX_TASK_IDS_KEPT",
    "Cancel",
    "Event",
    "MarkSuccess",
    "NodeEnded",
    "NodeRun",
    "NodeState",
    "Retry",
    "RunState",
    "Start",
    "Step",
    "Timeout",
    "WorkflowRun",
    "ended_event",
    "new_run",
    "parse_run_id",
    "run_id_of",
    "step",
]

MAX_TASK_IDS_KEPT = 8
"""Task ids a node's record keeps (the newest), and the characters of its reason: a run of 200
nodes of 1,000 shards each, with its definition snapshot (at most 256 KiB) and the trigger's
parameter (64 KiB), must stay below ZooKeeper's 1 MB node (about 700 KB at most)."""
_NODE_REASON_MAX_CHARS = 300
_REASON_MAX_CHARS = 1000
RUN_ID_SEPARATOR = "@"
"""Between the workflow's name and the fire time in a run id (never in a name)."""


class NodeState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self not in (NodeState.PENDING, NodeState.RUNNING)


class RunState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True)
class NodeRun:
    name: str
    state: NodeState = NodeState.PENDING
    attempt: int = 0
    """Launches of this node in this run so far (the current one while running)."""
    task_ids: tuple[str, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "state": self.state.value,
            "attempt": self.attempt,
            "taskIds": list(self.task_ids),
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> NodeRun:
        return cls(
            name=str(data["name"]),
            state=NodeState(str(data.get("state", "pending"))),
            attempt=int(str(data.get("attempt", 0))),
            task_ids=tuple(str(t) for t in _list(data.get("taskIds"))),
            started_at=_time(data.get("startedAt")),
            ended_at=_time(data.get("endedAt")),
            reason=str(data.get("reason") or ""),
        )


@dataclass(frozen=True)
class WorkflowRun:
    run_id: str
    definition: WorkflowConfig
    fire_time: float
    state: RunState = RunState.RUNNING
    nodes: Mapping[str, NodeRun] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    reason: str = ""
    parameter: str | None = None
    """The trigger's override of every node's job parameter (None: the jobs' own)."""
    backfill_id: str = ""
    """The backfill whose fire made the run (issue 28); "": its cron or a trigger."""

    @property
    def workflow_name(self) -> str:
        return self.definition.workflow_name

    @property
    def ended(self) -> bool:
        return self.state is not RunState.RUNNING

    def node(self, name: str) -> NodeRun:
        return self.nodes[name]

    def summary_json(self) -> dict[str, object]:
        """The run as `GET .../runs` lists it."""
        out: dict[str, object] = {
            "runId": self.run_id,
            "fireTime": self.fire_time,
            "state": self.state.value,
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
        }
        if self.backfill_id:
            out["backfillId"] = self.backfill_id
        return out

    def to_json(self) -> dict[str, object]:
        """The stored run (and `GET .../runs/{runId}`: the contract's fields and more)."""
        return {
            **self.summary_json(),
            "workflowName": self.workflow_name,
            "reason": self.reason,
            "parameter": self.parameter,
            "nodes": [self.nodes[n].to_json() for n in self.definition.node_names],
            "definition": self.definition.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object], *, max_nodes: int) -> WorkflowRun:
        """A stored run; ValueError/KeyError/InvalidRequest when it is not one."""
        raw_def = data["definition"]
        if not isinstance(raw_def, Mapping):
            raise ValueError("a run's definition must be an object")
        definition = WorkflowConfig.from_json(
            raw_def,
            max_nodes=max(max_nodes, len(_list(raw_def.get("nodes")))),
            default_time_zone="UTC",
            strict=False,
        )
        nodes = {}
        for item in _list(data.get("nodes")):
            if isinstance(item, Mapping):
                node = NodeRun.from_json(item)
                nodes[node.name] = node
        for name in definition.node_names:
            nodes.setdefault(name, NodeRun(name))
        parameter = data.get("parameter")
        return cls(
            run_id=str(data["runId"]),
            definition=definition,
            fire_time=float(str(data["fireTime"])),
            state=RunState(str(data.get("state", "running"))),
            nodes={n: nodes[n] for n in definition.node_names},
            started_at=_time(data.get("startedAt")),
            ended_at=_time(data.get("endedAt")),
            reason=str(data.get("reason") or ""),
            parameter=None if parameter is None else str(parameter),
            backfill_id=str(data.get("backfillId") or ""),
        )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _time(value: object) -> float | None:
    return None if value is None else float(str(value))


_ENDED_KINDS = {
    RunState.SUCCEEDED: JobEventKind.WORKFLOW_SUCCEEDED,
    RunState.FAILED: JobEventKind.WORKFLOW_FAILED,
    RunState.TIMED_OUT: JobEventKind.WORKFLOW_TIMED_OUT,
    RunState.CANCELLED: JobEventKind.WORKFLOW_CANCELLED,
}


def ended_event(run: WorkflowRun) -> JobEvent:
    """The event of an ended run: an event-trace row (the run id as its task id; its message
    the outcome, each node's result and the run's duration) and, failed or timed out, a
    webhook POST. ValueError for a run still running."""
    kind = _ENDED_KINDS.get(run.state)
    if kind is None:
        raise ValueError(f"run {run.run_id} has not ended")
    ended_at = run.ended_at or run.fire_time
    duration = ended_at - (run.started_at or run.fire_time)
    nodes = " ".join(f"{n}={r.state.value}" for n, r in run.nodes.items())
    reason = f"{run.state.value}" + (f" ({run.reason})" if run.reason else "")
    reason += f" in {duration:.1f} s; nodes: {nodes}"
    return JobEvent(
        kind,
        run.workflow_name,
        ended_at,
        reason[:_REASON_MAX_CHARS],
        task_id=run.run_id,
        execution_type="WORKFLOW",
        run_id=run.run_id,
    )


def run_id_of(workflow: str, fire_time: float) -> str:
    """The run id of `workflow`'s fire at epoch `fire_time`: `{workflow}@{epoch ms, 13 digits}`,
    so a fire makes one run whoever writes it, and ids sort by fire time."""
    return f"{workflow}{RUN_ID_SEPARATOR}{round(fire_time * 1000):013d}"


def parse_run_id(run_id: str) -> tuple[str, float]:
    """(workflow, fire time) of a run id; InvalidRequest when it is not one."""
    workflow, sep, millis = run_id.rpartition(RUN_ID_SEPARATOR)
    if not sep or not workflow or len(millis) != 13 or not millis.isdigit():
        raise InvalidRequest(
            f"{run_id[:120]!r} is no run id (workflow@epoch-ms)", fields={"runId": "malformed"}
        )
    return workflow, int(millis) / 1000


def new_run(
    definition: WorkflowConfig,
    fire_time: float,
    parameter: str | None = None,
    backfill_id: str = "",
) -> WorkflowRun:
    """A run not started yet (every node pending); `step(run, Start(now))` starts it.
    `backfill_id`: the backfill whose fire it is (issue 28)."""
    return WorkflowRun(
        run_id=run_id_of(definition.workflow_name, fire_time),
        definition=definition,
        fire_time=fire_time,
        nodes={n: NodeRun(n) for n in definition.node_names},
        parameter=parameter,
        backfill_id=backfill_id,
    )


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    at: float


@dataclass(frozen=True)
class NodeEnded:
    node: str
    attempt: int
    ok: bool
    at: float
    reason: str = ""
    task_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cancel:
    at: float
    reason: str = "cancelled"


@dataclass(frozen=True)
class Timeout:
    at: float


@dataclass(frozen=True)
class Retry:
    at: float


@dataclass(frozen=True)
class MarkSuccess:
    node: str
    at: float


Event = Start | NodeEnded | Cancel | Timeout | Retry | MarkSuccess


@dataclass(frozen=True)
class Step:
    run: WorkflowRun
    launch: tuple[str, ...] = ()
    """Nodes launched by this step (running, their attempt one more), in definition order."""
    kill: tuple[str, ...] = ()
    """Nodes cancelled while running: their tasks are to be killed."""


def step(run: WorkflowRun, event: Event) -> Step:
    """The run after `event`, with what to launch and kill. Raises Conflict for an operator's
    request the run's state refuses (retry of a running run, mark-success of a node that is
    pending, running or succeeded) and NotFound for a node the run does not have."""
    nodes = dict(run.nodes)
    state, reason, ended_at = run.state, run.reason, run.ended_at
    kill: list[str] = []
    match event:
        case Start(at=at):
            if run.started_at is not None:
                return Step(run)
            run = replace(run, started_at=at)
        case NodeEnded(node=name, attempt=attempt, ok=ok, at=at):
            current = nodes.get(name)
            if current is None or current.state is not NodeState.RUNNING:
                return Step(run)
            if current.attempt != attempt:
                return Step(run)
            nodes[name] = replace(
                current,
                state=NodeState.SUCCEEDED if ok else NodeState.FAILED,
                ended_at=at,
                reason=event.reason[:_NODE_REASON_MAX_CHARS],
                task_ids=_kept(current.task_ids, event.task_ids),
            )
            if not ok and run.definition.fail_fast:
                kill = _stop_all(nodes, at, NodeState.CANCELLED, f"failFast: node {name} failed")
        case Cancel(at=at, reason=why):
            if run.ended:
                return Step(run)
            kill = _stop_all(nodes, at, NodeState.CANCELLED, why)
            state, reason, ended_at = RunState.CANCELLED, why, at
        case Timeout(at=at):
            if run.ended:
                return Step(run)
            timeout_s = run.definition.timeout_seconds
            why = f"run timed out after {timeout_s} s"
            kill = _stop_all(nodes, at, NodeState.CANCELLED, why)
            state, reason, ended_at = RunState.TIMED_OUT, why, at
        case Retry(at=at):
            if not run.ended:
                raise Conflict(f"run {run.run_id} is still running: only an ended run is retried")
            again = [n for n, r in nodes.items() if r.state is not NodeState.SUCCEEDED]
            if not again:
                raise Conflict(f"run {run.run_id}: every node succeeded; nothing to retry")
            for name in again:
                nodes[name] = replace(
                    nodes[name], state=NodeState.PENDING, ended_at=None, reason=""
                )
            state, reason, ended_at = RunState.RUNNING, "", None
        case MarkSuccess(node=name, at=at):
            current = nodes.get(name)
            if current is None:
                raise NotFound(f"run {run.run_id} has no node {name}")
            if current.state not in (NodeState.FAILED, NodeState.SKIPPED, NodeState.CANCELLED):
                raise Conflict(
                    f"node {name} of run {run.run_id} is {current.state.value}: only a failed, "
                    "skipped or cancelled node is marked succeeded"
                )
            nodes[name] = replace(
                current, state=NodeState.SUCCEEDED, ended_at=at, reason="marked succeeded"
            )
            # What was skipped is looked at again: the mark may let it run.
            for other, record in nodes.items():
                if record.state is NodeState.SKIPPED:
                    nodes[other] = replace(
                        record, state=NodeState.PENDING, ended_at=None, reason=""
                    )
            if run.ended and state is not RunState.RUNNING:
                state, reason, ended_at = RunState.RUNNING, "", None
    at = event.at
    launch: list[str] = []
    if state is RunState.RUNNING:
        launch = _advance(run.definition, nodes, at)
        if all(r.state.ended for r in nodes.values()):
            failed = any(r.state in (NodeState.FAILED, NodeState.CANCELLED) for r in nodes.values())
            state = RunState.FAILED if failed else RunState.SUCCEEDED
            ended_at = at
            if failed:
                names = [n for n, r in nodes.items() if r.state is NodeState.FAILED]
                reason = f"failed node(s): {', '.join(names[:10])}" if names else "cancelled nodes"
    new = replace(run, nodes=nodes, state=state, reason=reason, ended_at=ended_at)
    return Step(new, tuple(launch), tuple(kill))


def _kept(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    merged = list(dict.fromkeys((*old, *new)))  # each task once, in the order first seen
    return tuple(merged[-MAX_TASK_IDS_KEPT:])


def _stop_all(nodes: dict[str, NodeRun], at: float, running_to: NodeState, why: str) -> list[str]:
    """Running nodes to `running_to` (returned: their tasks are killed), pending ones skipped."""
    killed = []
    for name, record in nodes.items():
        if record.state is NodeState.RUNNING:
            nodes[name] = replace(record, state=running_to, ended_at=at, reason=why)
            killed.append(name)
        elif record.state is NodeState.PENDING:
            nodes[name] = replace(record, state=NodeState.SKIPPED, ended_at=at, reason=why)
    return killed


def _verdict(condition: Condition, parents: list[NodeState]) -> bool | None:
    """True: the node runs now; False: it can no longer run (skip); None: wait."""
    if not parents:
        return True  # a root node runs at the run's start, whatever its condition
    ended = all(p.ended for p in parents)
    match condition:
        case Condition.ON_SUCCESS:
            if any(p.ended and p is not NodeState.SUCCEEDED for p in parents):
                return False
            return True if ended else None
        case Condition.ON_FAILURE:
            if not ended:
                return None
            return any(p is NodeState.FAILED for p in parents)
        case Condition.ON_DONE:
            return True if ended else None


def _advance(definition: WorkflowConfig, nodes: dict[str, NodeRun], at: float) -> list[str]:
    """Launch the ready pending nodes and skip those whose condition can no longer hold, to a
    fixpoint (a skip may decide a child in the same step). Nodes are in topological order
    (validation refuses cycles), so one pass in that order suffices; the loop guards the rest."""
    launched: list[str] = []
    order = _topological(definition)
    changed = True
    while changed:
        changed = False
        for name in order:
            record = nodes[name]
            if record.state is not NodeState.PENDING:
                continue
            node = definition.node(name)
            verdict = _verdict(node.condition, [nodes[p].state for p in node.depends_on])
            if verdict is None:
                continue
            changed = True
            if verdict:
                nodes[name] = replace(
                    record,
                    state=NodeState.RUNNING,
                    attempt=record.attempt + 1,
                    started_at=at,
                    ended_at=None,
                    reason="",
                )
                launched.append(name)
            else:
                nodes[name] = replace(
                    record, state=NodeState.SKIPPED, ended_at=at, reason="upstream_failed"
                )
    return launched


def _topological(definition: WorkflowConfig) -> tuple[str, ...]:
    """The nodes, parents before children (Kahn's order, ties in definition order)."""
    parents = {n.name: set(n.depends_on) for n in definition.nodes}
    children = definition.children()
    order: list[str] = []
    ready = [n for n in definition.node_names if not parents[n]]
    while ready:
        name = ready.pop(0)
        order.append(name)
        for child in children[name]:
            parents[child].discard(name)
            if not parents[child]:
                ready.append(child)
    if len(order) != len(definition.nodes):  # a cycle (never validated so): definition order
        return definition.node_names
    return tuple(order)
