"""A standby and API tokens (issue 26), with two in-process replicas on a real ZooKeeper: the
standby follows the token records itself (its leader-watch thread, woken by watches), answers a
request with a wrong, unknown or revoked token with its own 401 instead of a redirect, and still
redirects a right token and any Basic credentials to the leader. A token made or revoked is in
force on the standby as soon as the watch fires (the issue: within a second)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.model.access.records import TokenRecord, UserRecord, encode_token, encode_user
from scheduler.model.access.roles import Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm
from scheduler.storage.layout import access_token_path, access_user_path
from scheduler.storage.registry import Registry
from scheduler.wiring.replica import build_replica
from tests.support.replicas import http_get
from tests.support.waiting import wait_for

# The issue asks for a second; the test allows 3 s for a loaded machine, far below the re-read
# without a watch (60 s). `./dev.sh bench tokens` prints the time it takes.
IN_FORCE_S = 3.0
NOW_MS = 1_700_000_000_000


@pytest.fixture
def pair(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[tuple[Replica, Replica]]:
    """A leader (no components: it serves no API, which the standby never reaches here) and a
    standby that sees it as the vouched leader."""
    replicas: list[Replica] = []

    def make() -> Replica:
        settings = load_settings(
            {},
            {},
            {
                "zk_servers": zk.hosts,
                "zk_namespace": zk_namespace,
                "hostname": "127.0.0.1",
                "http_bind_address": "127.0.0.1",
                "http_port": str(free_port()),
                "zk_session_timeout_seconds": "3",
                "leader_retry_backoff_seconds": "0.2",
                # The polls below send the token before the standby knows it: failures, which
                # must not reach the limit (tested in tests/unit/edge).
                "auth_max_failures": "1000",
            },
        )
        replica = build_replica(settings, lambda ctx: BuiltTerm([]))
        replica.start()
        replicas.append(replica)
        return replica

    try:
        leader = make()
        wait_for(leader.is_acting_leader, 10, message="the first replica leads")
        standby = make()
        wait_for(
            lambda: (
                standby.health().get("leaderVouched") is True
                and standby.health().get("leader") == leader.settings.identity
            ),
            15,
            message="the standby vouches for the leader",
        )
        yield leader, standby
    finally:
        for replica in replicas:
            replica.stop(timeout_s=10)


def api_get(replica: Replica, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    status, _, body = http_get(f"http://{replica.settings.identity}/api/app", headers=headers)
    return status, {} if not body else json.loads(body)


def bearer(text: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {text}"}


def test_the_standby_refuses_wrong_and_revoked_tokens_itself_as_soon_as_the_watch_fires(
    pair: tuple[Replica, Replica], zk_client: KazooClient, zk_namespace: str
) -> None:
    _, standby = pair
    registry = Registry(zk_client, zk_namespace)
    registry.create(access_user_path("alice"), encode_user(UserRecord("alice", "x$y$z", NOW_MS)))
    text, parts = new_token()
    record = TokenRecord(
        parts.id,
        "ci",
        "user:alice",
        Role.OPERATOR,
        "team_a",
        secret_digest(parts.secret),
        NOW_MS,
        None,
    )
    # Unknown to the standby: its own 401, not a redirect that carries the token on.
    status, body = api_get(standby, bearer(text))
    assert status == 401 and body["type"] == "Unauthorized"
    registry.create(access_token_path(parts.id), encode_token(record))
    wait_for(
        lambda: api_get(standby, bearer(text))[0] == 307,
        IN_FORCE_S,
        message="the new token redirected to the leader",
    )
    wrong = text[:-1] + ("0" if text[-1] != "0" else "1")
    assert api_get(standby, bearer(wrong))[0] == 401
    assert api_get(standby, bearer("ejc_malformed"))[0] == 401
    registry.delete(access_token_path(parts.id))  # revoked
    wait_for(
        lambda: api_get(standby, bearer(text))[0] == 401,
        IN_FORCE_S,
        message="the revoked token refused by the standby",
    )


def test_the_standby_still_redirects_basic_credentials_right_or_wrong(
    pair: tuple[Replica, Replica],
) -> None:
    leader, standby = pair
    for user, password in (("root", "root"), ("root", "wrong")):
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        status, headers, _ = http_get(
            f"http://{standby.settings.identity}/api/app",
            headers={"Authorization": f"Basic {auth}"},
        )
        assert status == 307
        assert headers["Location"].startswith(f"http://{leader.settings.identity}/api/app")
