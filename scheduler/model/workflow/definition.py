"""A workflow's definition: a graph of registered jobs with its own schedule (issue 27).

`WorkflowConfig.from_json` reads the register/update body of the API's contract
(`workflowName`, `appName`, `cron`, `timeZone`, `misfire`, `overlapPolicy`, `timeoutSeconds`,
`failFast`, `description`, `nodes`, `excludeCalendars`) and checks the whole of it before
anything is written: every field bounded, no unknown field, a node named twice, a parent that
is not a node, a cycle (the message names it, as `a -> b -> a`), more than `max_nodes` nodes,
a node whose job is unknown (asked of `job_exists`), a calendar in `excludeCalendars` that
does not exist (asked of `calendar_exists`; issue 28: the workflow's cron fires in its excluded
periods are skipped). Every problem is one `InvalidRequest` (400) naming its field.

No I/O: the caller says which jobs exist and which zone is the default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scheduler.model.config import _wire
from scheduler.model.config.cron import CronSpec, parse_cron, time_zone_problem
from scheduler.model.config.job import read_calendar_names
from scheduler.model.config.policies import MAX_TIMEOUT_SECONDS, OverlapPolicy
from scheduler.model.errors import InvalidRequest

__all__ = [
    "FIELDS",
    "NODE_FIELDS",
    "Condition",
    "WorkflowConfig",
    "WorkflowNode",
    "find_cycle",
]

_KIND = "a workflow"
FIELDS = frozenset(
    {
        "workflowName",
        "appName",
        "cron",
        "timeZone",
        "misfire",
        "overlapPolicy",
        "timeoutSeconds",
        "failFast",
        "description",
        "nodes",
        "excludeCalendars",
    }
)
NODE_FIELDS = frozenset({"name", "job", "dependsOn", "condition"})
_LIMITS = {
    "cron": _wire.CRON_MAX_BYTES,
    "description": _wire.DESCRIPTION_MAX_BYTES,
    "timeZone": _wire.SHORT_TEXT_MAX_BYTES,
}
# An error names at most this many problems of the nodes (a body of 10,000 bad nodes gets a
# short answer).
_NODE_PROBLEMS_NAMED = 10


class Condition(StrEnum):
    """When a node runs, given how its parents ended (a root node runs at the run's start)."""

    ON_SUCCESS = "on_success"
    """Every parent succeeded (the default)."""
    ON_FAILURE = "on_failure"
    """Some parent failed."""
    ON_DONE = "on_done"
    """Every parent ended, whatever the result."""


@dataclass(frozen=True)
class WorkflowNode:
    name: str
    job: str
    depends_on: tuple[str, ...] = ()
    condition: Condition = Condition.ON_SUCCESS

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "job": self.job,
            "dependsOn": list(self.depends_on),
            "condition": self.condition.value,
        }


@dataclass(frozen=True)
class WorkflowConfig:
    """A registered workflow (`/workflows/config/{name}`), and a run's snapshot of it."""

    workflow_name: str
    app_name: str
    nodes: tuple[WorkflowNode, ...]
    cron: str = ""
    """"" : no schedule, the workflow runs only when triggered."""
    time_zone: str | None = None
    misfire: bool = False
    overlap_policy: OverlapPolicy = OverlapPolicy.FORBID
    timeout_seconds: int | None = None
    fail_fast: bool = False
    description: str = ""
    exclude_calendars: tuple[str, ...] = ()
    """`excludeCalendars` (issue 28): calendars whose excluded periods the cron's fires skip."""
    _by_name: dict[str, WorkflowNode] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def __post_init__(self) -> None:
        self._by_name.update((n.name, n) for n in self.nodes)

    def node(self, name: str) -> WorkflowNode:
        """The node named `name`; KeyError when there is none."""
        return self._by_name[name]

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def children(self) -> dict[str, tuple[str, ...]]:
        """Each node's children (the nodes that name it in `dependsOn`)."""
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for node in self.nodes:
            for parent in node.depends_on:
                out[parent].append(node.name)
        return {name: tuple(kids) for name, kids in out.items()}

    @property
    def jobs(self) -> frozenset[str]:
        return frozenset(n.job for n in self.nodes)

    def cron_spec(self, default_time_zone: str) -> CronSpec | None:
        """The parsed cron (None: no cron); InvalidRequest when it cannot be scheduled."""
        if not self.cron.strip():
            return None
        return parse_cron(self.cron, self.time_zone or default_time_zone)

    def to_json(self) -> dict[str, object]:
        """The contract's JSON (absent optional fields left out)."""
        out: dict[str, object] = {
            "workflowName": self.workflow_name,
            "appName": self.app_name,
            "cron": self.cron,
            "misfire": self.misfire,
            "overlapPolicy": self.overlap_policy.value,
            "failFast": self.fail_fast,
            "description": self.description,
            "nodes": [n.to_json() for n in self.nodes],
        }
        if self.time_zone is not None:
            out["timeZone"] = self.time_zone
        if self.timeout_seconds is not None:
            out["timeoutSeconds"] = self.timeout_seconds
        if self.exclude_calendars:
            out["excludeCalendars"] = list(self.exclude_calendars)
        return out

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, object],
        *,
        max_nodes: int,
        default_time_zone: str,
        job_exists: Callable[[str], bool] | None = None,
        calendar_exists: Callable[[str], bool] | None = None,
        strict: bool = True,
    ) -> WorkflowConfig:
        """Read and check a workflow. `strict` (API input) refuses unknown fields and checks
        the cron and the jobs; stored data (`strict=False`) is read with the same graph checks.
        Raises InvalidRequest naming every bad field."""
        reader = _wire.FieldReader(data, strict=strict, limits=_LIMITS)
        if strict:
            reader.refuse_unknown(FIELDS, f"is not a field of {_KIND}")
        name = reader.required_text("workflowName")
        if name is not None and (problem := _wire.name_problem(name)):
            reader.problem("workflowName", problem)
        app = reader.required_text("appName")
        if app is not None and (problem := _wire.name_problem(app)):
            reader.problem("appName", problem)
        cron = reader.text("cron", "").strip()
        time_zone = reader.optional_text("timeZone")
        if time_zone is not None and (problem := time_zone_problem(time_zone)):
            reader.problem("timeZone", problem)
        if strict and cron and reader.ok("cron") and reader.ok("timeZone"):
            try:
                parse_cron(cron, time_zone or default_time_zone)
            except InvalidRequest as exc:
                reader.problem("cron", exc.fields.get("cron", exc.message))
        misfire = reader.flag("misfire", False)
        policy = OverlapPolicy.FORBID
        raw_policy = reader.optional_text("overlapPolicy")
        if raw_policy is not None:
            choices = (OverlapPolicy.FORBID, OverlapPolicy.ALLOW)
            if raw_policy.strip().upper() in choices:
                policy = OverlapPolicy(raw_policy.strip().upper())
            else:
                reader.problem(
                    "overlapPolicy",
                    f"must be FORBID or ALLOW, not {_wire.shown(raw_policy)}",
                )
        timeout_s = (
            reader.integer("timeoutSeconds", 0) if reader.present("timeoutSeconds") else None
        )
        if timeout_s is not None and not 1 <= timeout_s <= MAX_TIMEOUT_SECONDS:
            reader.problem(
                "timeoutSeconds", f"must be between 1 and {MAX_TIMEOUT_SECONDS} (7 days)"
            )
            timeout_s = None
        fail_fast = reader.flag("failFast", False)
        description = reader.text("description", "")
        nodes = _read_nodes(reader, data.get("nodes"), max_nodes, strict)
        if nodes is not None and reader.ok("nodes"):
            _check_graph(reader, nodes)
        if nodes is not None and reader.ok("nodes") and job_exists is not None:
            unknown = sorted({n.job for n in nodes if not job_exists(n.job)})
            if unknown:
                shown = ", ".join(unknown[:_NODE_PROBLEMS_NAMED])
                more = (
                    f" and {len(unknown) - _NODE_PROBLEMS_NAMED} more" if len(unknown) > 10 else ""
                )
                reader.problem("nodes", f"unknown job(s): {shown}{more}")
        calendars = read_calendar_names(reader, "excludeCalendars")
        if calendar_exists is not None and (
            unknown := [c for c in calendars if not calendar_exists(c)]
        ):
            reader.problem("excludeCalendars", f"unknown calendar(s): {', '.join(unknown)}")
        reader.raise_if_any(_KIND)
        assert name is not None and app is not None and nodes is not None
        return cls(
            workflow_name=name,
            app_name=app,
            nodes=tuple(nodes),
            cron=cron,
            time_zone=time_zone,
            misfire=misfire,
            overlap_policy=policy,
            timeout_seconds=timeout_s,
            fail_fast=fail_fast,
            description=description,
            exclude_calendars=calendars,
        )


def _read_nodes(
    reader: _wire.FieldReader, raw: object, max_nodes: int, strict: bool
) -> list[WorkflowNode] | None:
    """The `nodes` list read, one problem per bad node (the first few named); None when bad."""
    if raw is None:
        reader.problem("nodes", "is required")
        return None
    if not isinstance(raw, list):
        reader.problem("nodes", "must be a list of nodes")
        return None
    if not raw:
        reader.problem("nodes", "must hold at least one node")
        return None
    if len(raw) > max_nodes:
        reader.problem(
            "nodes", f"must hold at most {max_nodes} nodes (max_workflow_nodes), not {len(raw)}"
        )
        return None
    nodes: list[WorkflowNode] = []
    problems: dict[str, str] = {}
    for index, item in enumerate(raw):
        where = f"nodes[{index}]"
        if not isinstance(item, Mapping):
            problems[where] = "must be an object"
            continue
        node_reader = _wire.FieldReader(item, strict=strict)
        if strict:
            node_reader.refuse_unknown(NODE_FIELDS, "is not a field of a workflow node")
        name = node_reader.required_text("name")
        if name is not None and (problem := _wire.name_problem(name)):
            node_reader.problem("name", problem)
        job = node_reader.required_text("job")
        if job is not None and (problem := _wire.name_problem(job)):
            node_reader.problem("job", problem)
        parents = _read_parents(node_reader, item.get("dependsOn"), max_nodes)
        condition = Condition.ON_SUCCESS
        raw_condition = node_reader.optional_text("condition")
        if raw_condition is not None:
            try:
                condition = Condition(raw_condition.strip().lower())
            except ValueError:
                choices = ", ".join(c.value for c in Condition)
                node_reader.problem(
                    "condition", f"must be one of {choices}, not {_wire.shown(raw_condition)}"
                )
        for key, why in node_reader.problems.items():
            problems[f"{where}.{key}"] = why
        if node_reader.problems:
            continue
        assert name is not None and job is not None and parents is not None
        nodes.append(WorkflowNode(name, job, parents, condition))
    if problems:
        for key, why in list(problems.items())[:_NODE_PROBLEMS_NAMED]:
            reader.problem(key, why)
        reader.problem("nodes", "has bad nodes")
        return None
    return nodes


def _read_parents(reader: _wire.FieldReader, raw: object, max_nodes: int) -> tuple[str, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        reader.problem("dependsOn", "must be a list of node names")
        return None
    if len(raw) > max_nodes:
        reader.problem("dependsOn", f"must name at most {max_nodes} nodes")
        return None
    parents: list[str] = []
    for parent in raw:
        assert isinstance(parent, str)
        if (problem := _wire.name_problem(parent)) is not None:
            reader.problem("dependsOn", f"{_wire.shown(parent)} {problem}")
            return None
        if parent in parents:
            reader.problem("dependsOn", f"names {parent} twice")
            return None
        parents.append(parent)
    return tuple(parents)


def _check_graph(reader: _wire.FieldReader, nodes: list[WorkflowNode]) -> None:
    """A node named twice, a parent that is not a node, a node its own parent, a cycle."""
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            reader.problem("nodes", f"node {node.name} is named twice")
            return
        seen.add(node.name)
    for node in nodes:
        for parent in node.depends_on:
            if parent == node.name:
                reader.problem(
                    "nodes", f"node {node.name} depends on itself: cycle {parent} -> {parent}"
                )
                return
            if parent not in seen:
                reader.problem(
                    "nodes", f"node {node.name} depends on {parent}, which is not a node"
                )
                return
    cycle = find_cycle((n.name, n.depends_on) for n in nodes)
    if cycle is not None:
        reader.problem("nodes", f"cycle: {' -> '.join(cycle)}")


def find_cycle(graph: Iterable[tuple[str, Iterable[str]]]) -> list[str] | None:
    """A cycle of the graph given as (node, its parents), as a path that starts and ends at the
    same node (`[a, b, a]`: a depends on b, b on a); None when it has none. Iterative (a
    200-node chain must not reach Python's recursion limit); linear in nodes and edges."""
    parents = {name: list(deps) for name, deps in graph}
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(parents, white)
    for start in parents:
        if colour[start] != white:
            continue
        colour[start] = grey
        path = [start]
        stack = [iter(parents[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            if nxt not in colour:
                continue  # not a node: reported by the caller
            if colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(parents[nxt]))
    return None
