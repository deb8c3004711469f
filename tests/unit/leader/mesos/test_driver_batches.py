"""The driver's event thread hands status updates that queued up one after another to the
status handler together (issue 29), every other event in its place, and acknowledges each
update the handler says it processed."""

from __future__ import annotations

from typing import Any

from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.driver_events import DriverEvent, Offers, Rescinded, StatusUpdate
from scheduler.model.settings import load_settings


def _status(name: str, uuid: bool = True) -> dict[str, Any]:
    return {"task_id": {"value": name}, "state": "TASK_RUNNING", **({"uuid": name} if uuid else {})}


def _driver(calls: list[tuple[str, Any]], refused: set[str], batches: bool = True) -> MesosDriver:
    driver = MesosDriver(
        load_settings({}, {}, {"mesos_url": "http://127.0.0.1:5050"}),
        framework_ids=None,  # type: ignore[arg-type]
    )

    def on_status(status: dict[str, Any]) -> bool:
        calls.append(("status", status["task_id"]["value"]))
        return status["task_id"]["value"] not in refused

    def on_statuses(statuses: list[dict[str, Any]]) -> list[bool]:
        names = [s["task_id"]["value"] for s in statuses]
        calls.append(("statuses", names))
        return [name not in refused for name in names]

    driver.bind(
        DriverHandlers(
            on_offers=lambda offers: calls.append(("offers", len(offers))),
            on_rescind=lambda offer_id: calls.append(("rescind", offer_id)),
            on_status=on_status,
            on_connected=lambda: None,
            on_disconnected=lambda: None,
            on_statuses=on_statuses if batches else None,
        )
    )
    return driver


def _acked(driver: MesosDriver) -> list[str]:
    out = []
    while not driver._acks.empty():
        status = driver._acks.get_nowait()
        assert status is not None
        out.append(status["task_id"]["value"])
    return out


def _events() -> list[DriverEvent]:
    return [
        StatusUpdate(_status("s1")),
        StatusUpdate(_status("s2")),
        Offers([{"id": {"value": "o1"}}]),
        StatusUpdate(_status("s3")),
        Rescinded("o1"),
        StatusUpdate(_status("s4")),
        StatusUpdate(_status("s5", uuid=False)),  # the master's own: nothing to acknowledge
    ]


def test_updates_in_a_row_go_to_the_handler_together_and_other_events_keep_their_place() -> None:
    calls: list[tuple[str, Any]] = []
    driver = _driver(calls, refused={"s2"})
    driver._handle_batch(_events())
    assert calls == [
        ("statuses", ["s1", "s2"]),
        ("offers", 1),
        ("statuses", ["s3"]),  # alone between two other events: a batch of one
        ("rescind", "o1"),
        ("statuses", ["s4", "s5"]),
    ]
    assert _acked(driver) == ["s1", "s3", "s4"]


def test_an_update_taken_alone_goes_to_the_batch_handler_too() -> None:
    calls: list[tuple[str, Any]] = []
    driver = _driver(calls, refused={"s2"})
    driver._handle(StatusUpdate(_status("s1")))
    driver._handle(StatusUpdate(_status("s2")))
    assert calls == [("statuses", ["s1"]), ("statuses", ["s2"])]
    assert _acked(driver) == ["s1"]


def test_without_a_batch_handler_each_update_goes_on_its_own() -> None:
    calls: list[tuple[str, Any]] = []
    driver = _driver(calls, refused={"s2"}, batches=False)
    driver._handle_batch(_events())
    assert [c for c in calls if c[0].startswith("status")] == [
        ("status", name) for name in ("s1", "s2", "s3", "s4", "s5")
    ]
    assert _acked(driver) == ["s1", "s3", "s4"]


def test_a_batch_handler_that_fails_acknowledges_none_of_its_updates() -> None:
    calls: list[tuple[str, Any]] = []
    driver = _driver(calls, refused=set())

    def broken(statuses: list[dict[str, Any]]) -> list[bool]:
        raise RuntimeError("a bug")

    driver._handlers = DriverHandlers(
        on_offers=lambda offers: None,
        on_rescind=lambda offer_id: None,
        on_status=lambda status: True,
        on_connected=lambda: None,
        on_disconnected=lambda: None,
        on_statuses=broken,
    )
    driver._handle_batch([StatusUpdate(_status("a")), StatusUpdate(_status("b"))])
    assert _acked(driver) == []  # the agents send them again
