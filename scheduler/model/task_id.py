"""Task ids: `{job}@-@{item}@-@{READY|FAILOVER}@-@{agentId}@-@{uuid}`, as Elastic-Job-Cloud
2.1.5 builds them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import NamedTuple

from scheduler.model.errors import SchedulerError

DELIMITER = "@-@"


class TaskType(StrEnum):
    READY = "READY"
    FAILOVER = "FAILOVER"


class InvalidTaskId(SchedulerError, ValueError):
    """Text that is not a task id of this scheduler (a ValueError too, as callers catch)."""

    http_status = 400


@dataclass(frozen=True)
class TaskId:
    job_name: str
    item: int
    type: TaskType
    agent_id: str
    uid: str

    @classmethod
    def new(cls, job_name: str, item: int, task_type: TaskType, agent_id: str) -> TaskId:
        return cls(job_name, item, task_type, agent_id, uuid.uuid4().hex)

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Raises InvalidTaskId unless `text` has the five parts of a task id. The last ids
        parsed are kept (a task's id is parsed by the launcher, the status handler, the
        statistics and the metrics, for each of its updates: issue 29)."""
        return _parsed(text)

    @classmethod
    def _parse(cls, text: str) -> TaskId:
        parts = text.split(DELIMITER)
        if len(parts) != 5:
            raise InvalidTaskId(f"task id {text!r} does not have 5 parts separated by {DELIMITER}")
        job, item, kind, agent, uid = parts
        if not item.isdigit():
            raise InvalidTaskId(f"task id {text!r}: sharding item {item!r} is not a number")
        task_type = _TYPES.get(kind)  # not `TaskType(kind)`: a lookup is a fifth of its time
        if task_type is None:
            raise InvalidTaskId(f"task id {text!r}: type {kind!r} is not READY or FAILOVER")
        return cls(job, int(item), task_type, agent, uid)

    @property
    def shard_key(self) -> str:
        """`{job}@-@{item}`: the failover node name of this shard."""
        return f"{self.job_name}{DELIMITER}{self.item}"

    @property
    def executor_suffix(self) -> str:
        return self.agent_id

    def __str__(self) -> str:
        return self._text

    @cached_property
    def _text(self) -> str:
        return DELIMITER.join(
            (self.job_name, str(self.item), self.type.value, self.agent_id, self.uid)
        )


_TYPES = {kind.value: kind for kind in TaskType}


class LaunchedTask(NamedTuple):
    """A task the launcher launched, or may have (its ACCEPT unanswered): the launch listeners
    get a round's tasks in one list (issue 29: one call per task cost a 10,000-task round
    about a fifth of its time)."""

    task: TaskId
    agent_id: str
    original_task_id: str
    """The task it relaunches (a failover launch), else its own id."""


# Bounded: ids that come from clients (a kill through the API) cannot grow it.
_parsed = lru_cache(maxsize=8192)(TaskId._parse)
