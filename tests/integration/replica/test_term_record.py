"""The term record against a real ZooKeeper: written at start, refreshed on its own named
thread while the term acts (again after a pause), and the thread joined at stop."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term, term_number
from scheduler.replica.terms_log import TermRecorder
from scheduler.storage.layout import term_path
from scheduler.storage.registry import Registry
from tests.support.waiting import wait_for


def _threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


@pytest.fixture
def ctx(zk_client: KazooClient, zk_namespace: str) -> LeaderContext:
    registry = Registry(zk_client, zk_namespace)
    registry.ensure("/ha/election")
    node = zk_client.create(
        registry.abs("/ha/election/n__lock__"), b"me", ephemeral=True, sequence=True
    )
    term = Term(term_number(node), node, zk_client.client_id[0])
    settings = load_settings({}, {}, {"zk_namespace": zk_namespace})
    return LeaderContext(settings, registry, term, mount_api=lambda _app: None)


@pytest.fixture
def recorder(ctx: LeaderContext) -> Iterator[TermRecorder]:
    recorder = TermRecorder(ctx)
    yield recorder
    recorder.stop()


def _record(ctx: LeaderContext) -> dict[str, Any]:
    data = ctx.registry.get(term_path(ctx.term.number))
    assert data is not None
    record: dict[str, Any] = json.loads(data)
    return record


def test_the_record_is_refreshed_on_its_named_thread_and_the_thread_joined_at_stop(
    ctx: LeaderContext, recorder: TermRecorder
) -> None:
    assert not _threads_named("sched-term-record")
    recorder.start()
    first = _record(ctx)
    assert first["number"] == ctx.term.number
    assert first["identity"] == ctx.settings.identity
    assert first["startedAt"] == ctx.term.started_at
    assert len(_threads_named("sched-term-record")) == 1

    wait_for(
        lambda: _record(ctx)["lastActingAt"] > first["lastActingAt"],
        5,
        message="the record refreshed",
    )

    recorder.stop()
    assert not _threads_named("sched-term-record")


def test_the_record_goes_on_being_refreshed_after_a_pause(
    ctx: LeaderContext, recorder: TermRecorder
) -> None:
    recorder.start()
    ctx.term.stop_acting()
    # Every refresh is fenced: none written after the pause carries a later time.
    paused = _record(ctx)["lastActingAt"]
    assert paused <= (ctx.term.paused_at or 0.0)
    ctx.term.resume_acting()
    wait_for(
        lambda: _record(ctx)["lastActingAt"] > paused,
        5,
        message="refreshed again once acting",
    )
    assert len(_threads_named("sched-term-record")) == 1
