"""ACCEPT: offer checks, per-task validation, accounting and hand-off to the agent, with the
Mesos master's checks and messages. Always answered 202; failures come back as master updates
without a uuid.

One leniency: a TaskInfo missing a required field (agent_id, name) gets TASK_ERROR here,
where Mesos would fail to parse the whole call with a 400, which kills a pymesos driver.
"""

from __future__ import annotations

import logging
from typing import Any

from .agent import Agent
from .master import Framework, Master, Task
from .offers import Offer
from .protocol import Json, id_value, valid_id, wrap
from .resources import ResourceError, Resources

log = logging.getLogger(__name__)


def offer_ids(payload: Json) -> list[str]:
    return [
        str(item["value"])
        for item in payload.get("offer_ids") or []
        if isinstance(item, dict) and isinstance(item.get("value"), str)
    ]


def refuse_seconds(payload: Json) -> float | None:
    filters = payload.get("filters")
    if isinstance(filters, dict) and isinstance(filters.get("refuse_seconds"), int | float):
        return float(filters["refuse_seconds"])
    return None


def accept(master: Master, framework: Framework, payload: Json) -> None:
    ids = offer_ids(payload)
    operations = [op for op in payload.get("operations") or [] if isinstance(op, dict)]
    offers: list[Offer] = []
    error: str | None = None if ids else "No offers specified"
    if len(set(ids)) != len(ids):
        error = "Duplicate offers specified"
    for offer_id in ids:
        offer = master.offers.offers.get(offer_id)
        if offer is None:
            error = error or f"Offer {offer_id} is no longer valid"
        elif offer.framework_id != framework.id:
            error = error or f"Offer {offer_id} has invalid framework"
        else:
            offers.append(offer)
    if error is None and len({o.agent_id for o in offers}) != 1:
        error = "Aggregated offers must belong to one single agent"
    for offer in offers:
        master.offers.take(offer.id)
    master.request_allocation()
    if error is not None:
        # Every task gets LOST (DROPPED if partition aware); surviving offers are recovered.
        state = "TASK_DROPPED" if framework.partition_aware else "TASK_LOST"
        for task in _tasks_of(operations):
            task_id = id_value(task, "task_id")
            if task_id is not None:
                master.master_update(
                    framework,
                    task_id,
                    state,
                    "REASON_INVALID_OFFERS",
                    f"Task launched with invalid offers: {error}",
                    id_value(task, "agent_id"),
                )
        return
    agent = master.agents[offers[0].agent_id]
    available = Resources()
    for offer in offers:
        available = available + offer.resources
    launched: list[str] = []
    # The master accounts every task first (TASK_STAGING from then on), then hands them to the
    # agent, as Mesos sends an agent its tasks after adding them; the agent starts them once
    # all are handed over.
    runs = _Runs()
    with agent.launching():
        for operation in operations:
            kind = operation.get("type")
            if kind == "LAUNCH":
                launch = operation.get("launch") or {}
                for task in launch.get("task_infos") or []:
                    available = _launch(
                        master, framework, agent, available, [task], None, launched, runs
                    )
            elif kind == "LAUNCH_GROUP":
                group = operation.get("launch_group") or {}
                executor = group.get("executor")
                tasks = (group.get("task_group") or {}).get("tasks") or []
                available = _launch(
                    master,
                    framework,
                    agent,
                    available,
                    tasks,
                    executor if executor else {},
                    launched,
                    runs,
                )
            else:
                log.warning(
                    "framework %s: operation %s is not supported, skipped", framework.id, kind
                )
        if launched:
            # One line per ACCEPT: what a log reader needs to see a launch round as one event.
            log.info(
                "framework %s: launched %d task(s) on %s: %s",
                framework.id,
                len(launched),
                agent.hostname,
                " ".join(launched),
            )
        for infos, executor_info, group in runs.handed:
            agent.run_tasks(framework.info, infos, executor_info, group)
    master.offers.add_filter(framework.id, agent.id, available, refuse_seconds(payload))


def _tasks_of(operations: list[Json]) -> list[Json]:
    tasks: list[Json] = []
    for op in operations:
        if op.get("type") == "LAUNCH":
            tasks += (op.get("launch") or {}).get("task_infos") or []
        elif op.get("type") == "LAUNCH_GROUP":
            tasks += ((op.get("launch_group") or {}).get("task_group") or {}).get("tasks") or []
    return [t for t in tasks if isinstance(t, dict)]


class _Runs:
    """What one ACCEPT hands its agent once every task is accounted: (TaskInfos, their
    ExecutorInfo or None, whether a task group), in order; and the executors it starts, by id,
    with their info (a later task of the same ACCEPT finds its executor there)."""

    def __init__(self) -> None:
        self.handed: list[tuple[list[Json], Json | None, bool]] = []
        self.executors: dict[str, Json] = {}


def _launch(
    master: Master,
    framework: Framework,
    agent: Agent,
    available: Resources,
    tasks: list[Any],
    group_executor: Json | None,
    launched: list[str],
    runs: _Runs,
) -> Resources:
    """Validate and account `tasks` (a LAUNCH_GROUP when `group_executor` is given), handed to
    the agent through `runs`; returns what is left of the offered resources and appends the ids
    it launched to `launched`."""
    infos: list[Json] = []
    needed = Resources()
    errors: list[tuple[Json, str]] = []
    executor_info: Json | None = None
    new_executor = False
    seen: set[str] = set()
    for raw in tasks:
        if not isinstance(raw, dict) or id_value(raw, "task_id") is None:
            log.warning("framework %s: task without task_id skipped", framework.id)
            continue
        task = dict(raw)
        if task["task_id"]["value"] in seen:
            errors.append((task, f"Task has duplicate ID: {task['task_id']['value']}"))
            continue
        seen.add(task["task_id"]["value"])
        if group_executor is not None:
            task["executor"] = group_executor
        try:
            info, executor_info, new_executor = _validate(master, framework, agent, task, runs)
        except _Invalid as exc:
            errors.append((task, str(exc)))
            continue
        task_resources = Resources.from_json(task.get("resources"))
        needed = needed + task_resources
        infos.append(info)
    if infos and executor_info is not None and new_executor:
        needed = needed + Resources.from_json(executor_info.get("resources"))
    if infos and not available.contains(needed):
        for info in infos:
            errors.append((info, f"Task uses more resources {needed} than available {available}"))
        infos = []
    if group_executor is not None and errors:
        errors += [(info, "Task group is invalid") for info in infos]
        infos = []
    for task, message in errors:
        task_id = task["task_id"]["value"]
        log.info("task %s: TASK_ERROR: %s", task_id, message)
        master.master_update(
            framework,
            task_id,
            "TASK_ERROR",
            "REASON_TASK_INVALID",
            message,
            id_value(task, "agent_id"),
        )
    if not infos:
        return available
    if executor_info is not None and new_executor:
        agent.used = agent.used + Resources.from_json(executor_info.get("resources"))
    for info in infos:
        resources = Resources.from_json(info.get("resources"))
        agent.used = agent.used + resources
        task_id = info["task_id"]["value"]
        record = Task(
            id=task_id,
            framework_id=framework.id,
            agent_id=agent.id,
            executor_id=id_value(executor_info, "executor_id") if executor_info else None,
            name=str(info.get("name", "")),
            resources=resources,
            info=info,
        )
        framework.tasks[task_id] = record
        log.debug("task %s: launching on agent %s", task_id, agent.id)  # the ACCEPT names all
        launched.append(task_id)
    if executor_info is not None and new_executor:
        runs.executors[str(id_value(executor_info, "executor_id"))] = executor_info
    runs.handed.append((infos, executor_info, group_executor is not None))
    return available - needed


class _Invalid(Exception):
    pass


def _validate(
    master: Master, framework: Framework, agent: Agent, task: Json, runs: _Runs
) -> tuple[Json, Json | None, bool]:
    """Returns (TaskInfo to send, its ExecutorInfo or None, whether that executor is new: not
    running on the agent, nor started by an earlier task of this ACCEPT)."""
    task_id = task["task_id"]["value"]
    problem = valid_id(task_id)
    if problem:
        raise _Invalid(f"Task ID '{task_id}' is invalid: {problem}")
    if task_id in framework.tasks:
        raise _Invalid(f"Task has duplicate ID: {task_id}")
    if not isinstance(task.get("name"), str):
        raise _Invalid("Task has no name")
    if id_value(task, "agent_id") != agent.id:
        raise _Invalid(
            f"Task uses agent ID {id_value(task, 'agent_id')} which is not the agent "
            f"{agent.id} of the offers"
        )
    try:
        resources = Resources.from_json(task.get("resources"))
    except ResourceError as exc:
        raise _Invalid(f"Task uses invalid resources: {exc}") from exc
    if resources.is_empty():
        raise _Invalid("Task uses no resources")
    has_command, executor = isinstance(task.get("command"), dict), task.get("executor")
    if has_command == isinstance(executor, dict):
        raise _Invalid(
            "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present"
        )
    if not isinstance(executor, dict):
        return task, None, False
    executor_id = id_value(executor, "executor_id")
    if executor_id is None or valid_id(executor_id):
        raise _Invalid("ExecutorInfo has an invalid executor_id")
    if not isinstance(executor.get("command"), dict):
        raise _Invalid(f"Executor '{executor_id}' has no CommandInfo")
    given = id_value(executor, "framework_id")
    if given is not None and given != framework.id:
        raise _Invalid(
            f"ExecutorInfo has an invalid FrameworkID (Actual: {given} vs Expected: {framework.id})"
        )
    try:
        Resources.from_json(executor.get("resources"))
    except ResourceError as exc:
        raise _Invalid(f"Executor uses invalid resources: {exc}") from exc
    info = {**executor, "framework_id": wrap(framework.id)}
    live = agent.live_executor(framework.id, executor_id)
    existing = live.info if live is not None else runs.executors.get(executor_id)
    if existing is not None and existing != info:
        raise _Invalid(
            f"ExecutorInfo is not compatible with ExecutorInfo of running executor {executor_id}"
        )
    return {**task, "executor": info}, info, existing is None
