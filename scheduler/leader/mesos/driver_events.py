"""What pymesos tells the driver, as typed events: its scheduler callbacks run on pymesos's IO
thread and only turn their arguments into one of these and queue it; the driver's event thread
handles each (`MesosDriver._handle`, which fails loudly on a kind it does not handle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class PymesosDriver(Protocol):
    """The calls the driver makes on a pymesos `MesosSchedulerDriver` (an untyped library: this
    names what is used of it, so that a misspelt call fails the type check)."""

    def start(self) -> None: ...

    def stop(self, failover: bool = False) -> None: ...

    def declineOffer(self, offer_ids: list[dict[str, str]], filters: dict[str, Any]) -> None: ...

    def reviveOffers(self) -> None: ...

    def suppressOffers(self) -> None: ...

    def killTask(self, task_id: dict[str, str]) -> None: ...

    def reconcileTasks(self, tasks: list[dict[str, Any]]) -> None: ...

    def sendFrameworkMessage(
        self, executor_id: dict[str, str], agent_id: dict[str, str], data: str
    ) -> None: ...

    # Where the hot calls go (`calls.CallEndpoint`): the leading master (`host:port`),
    # the subscription's stream id (None until subscribed) and the framework id.
    @property
    def master(self) -> str | None: ...

    @property
    def stream_id(self) -> str | None: ...

    @property
    def framework_id(self) -> str | None: ...


@dataclass(frozen=True)
class Connect:
    """(Re)connect now: at start, on resume, after a master error."""


@dataclass(frozen=True)
class ConnectFailed:
    """Starting the pymesos `driver` raised `error` (on `sched-mesos-connect`)."""

    driver: PymesosDriver
    error: Exception


@dataclass(frozen=True)
class Subscribed:
    """SUBSCRIBED: `framework_id` is the id Mesos gave (None on a re-registration)."""

    framework_id: str | None
    master_info: dict[str, Any]


@dataclass(frozen=True)
class Disconnected:
    """The connection to the master broke; pymesos reconnects."""


@dataclass(frozen=True)
class Offers:
    offers: list[dict[str, Any]]


@dataclass(frozen=True)
class Rescinded:
    offer_id: str


@dataclass(frozen=True)
class StatusUpdate:
    status: dict[str, Any]


@dataclass(frozen=True)
class FrameworkMessage:
    """A message an executor sent to the framework (`data` as pymesos gives it: base64)."""

    executor_id: str
    agent_id: str
    data: str


@dataclass(frozen=True)
class AgentLost:
    agent_id: str


@dataclass(frozen=True)
class ExecutorLost:
    executor_id: str
    agent_id: str
    status: Any


@dataclass(frozen=True)
class MasterError:
    message: str


DriverEvent = (
    Connect
    | ConnectFailed
    | Subscribed
    | Disconnected
    | Offers
    | Rescinded
    | StatusUpdate
    | FrameworkMessage
    | AgentLost
    | ExecutorLost
    | MasterError
)


def _value(field: Any) -> str:
    """`{"value": x}` -> x (pymesos passes ids as such dicts)."""
    return str(field["value"]) if isinstance(field, dict) else str(field)


class QueueingCallbacks:
    """pymesos's Scheduler interface: every callback only queues an event (never blocks the IO
    thread)."""

    def __init__(self, post: Callable[[DriverEvent], None]) -> None:
        self._post = post

    def registered(self, driver: Any, framework_id: Any, master_info: Any) -> None:
        self._post(Subscribed(_value(framework_id), master_info))

    def reregistered(self, driver: Any, master_info: Any) -> None:
        self._post(Subscribed(None, master_info))

    def disconnected(self, driver: Any) -> None:
        self._post(Disconnected())

    def resourceOffers(self, driver: Any, offers: Any) -> None:
        self._post(Offers(list(offers)))

    def offerRescinded(self, driver: Any, offer_id: Any) -> None:
        self._post(Rescinded(_value(offer_id)))

    def statusUpdate(self, driver: Any, status: Any) -> None:
        self._post(StatusUpdate(status))

    def frameworkMessage(self, driver: Any, executor_id: Any, agent_id: Any, data: Any) -> None:
        self._post(FrameworkMessage(_value(executor_id), _value(agent_id), str(data)))

    def slaveLost(self, driver: Any, agent_id: Any) -> None:
        self._post(AgentLost(_value(agent_id)))

    def executorLost(self, driver: Any, executor_id: Any, agent_id: Any, status: Any) -> None:
        self._post(ExecutorLost(_value(executor_id), _value(agent_id), status))

    def error(self, driver: Any, message: str) -> None:
        self._post(MasterError(str(message)))

    def __getattr__(self, name: str) -> Callable[..., None]:
        # inverseOffers, operationStatusUpdate, ...: not used by this framework.
        return lambda *args, **kwargs: None
