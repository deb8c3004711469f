"""The scheduler API on the wire: status codes, streaming, offers, filters, auth."""

from __future__ import annotations

import base64
import itertools
import time
import uuid
from collections.abc import Callable

from tests.support.mesosfw import Framework, RawSubscription, RecordingScheduler, StandIn, wait_for

SUBSCRIBE = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "raw"}}}


def test_version_is_numeric_and_health_is_empty(standin: StandIn) -> None:
    version = standin.get_json("/version")["version"]
    assert tuple(int(n) for n in version.split(".")) >= (1, 0, 0)
    status, body, _ = standin.request("GET", "/health")
    assert (status, body) == (200, b"")


def test_subscribe_streams_chunked_recordio_events_with_a_stream_id(standin: StandIn) -> None:
    sub = RawSubscription(standin.address, SUBSCRIBE)
    try:
        assert sub.status == 200
        assert sub.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in sub.headers
        assert sub.stream_id is not None and uuid.UUID(sub.stream_id)

        subscribed = sub.next_event()
        assert subscribed["type"] == "SUBSCRIBED"
        framework_id = subscribed["subscribed"]["framework_id"]["value"]
        assert subscribed["subscribed"]["heartbeat_interval_seconds"] == 15.0
        address = subscribed["subscribed"]["master_info"]["address"]
        assert f"{address['ip']}:{address['port']}" == standin.address
        assert sub.next_event() == {"type": "HEARTBEAT"}

        offer = sub.next_of("OFFERS")["offers"]["offers"][0]
        assert offer["framework_id"]["value"] == framework_id
        assert offer["hostname"] == "agent0.localmesos"
        by_name = {r["name"]: r for r in offer["resources"]}
        assert by_name["cpus"]["scalar"]["value"] == 4.0
        assert by_name["mem"]["scalar"]["value"] == 4096.0
        assert by_name["ports"]["ranges"]["range"] == [{"begin": 31000, "end": 32000}]
        assert by_name["cpus"]["allocation_info"] == {"role": "*"}

        # Calls: 202, an empty body delimited by Content-Length: 0.
        decline = {
            "type": "DECLINE",
            "framework_id": {"value": framework_id},
            "decline": {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 60}},
        }
        for body in (decline, {"type": "SUPPRESS", "framework_id": {"value": framework_id}}):
            status, raw, headers = sub.call(body)
            assert (status, raw, headers["Content-Length"]) == (202, b"", "0")
    finally:
        sub.close()


def test_calls_are_refused_only_where_mesos_refuses_them(standin: StandIn) -> None:
    def post(body: bytes, headers: dict[str, str]) -> int:
        return standin.request("POST", "/api/v1/scheduler", body, headers)[0]

    json_type = {"Content-Type": "application/json"}
    assert standin.request("GET", "/api/v1/scheduler")[0] == 405
    assert post(b'{"type": "REVIVE"}', {}) == 400  # no Content-Type
    assert post(b'{"type": "REVIVE"}', {"Content-Type": "text/plain"}) == 415
    assert post(b"{not json", json_type) == 400
    assert post(b'{"type": "UNKNOWN", "framework_id": {"value": "x"}}', json_type) == 501
    unknown = b'{"type": "REVIVE", "framework_id": {"value": "nope"}}'
    assert post(unknown, {**json_type, "Mesos-Stream-Id": "x"}) == 400
    assert post(b'{"type": "SUBSCRIBE"}', json_type) == 400
    subscribe = RawSubscription(standin.address, SUBSCRIBE, {"Mesos-Stream-Id": "x"})
    assert subscribe.status == 400
    subscribe.close()
    subscribe = RawSubscription(standin.address, SUBSCRIBE, {"Accept": "text/html"})
    assert subscribe.status == 406
    subscribe.close()

    info = {"user": "u", "name": "raw", "failover_timeout": 60.0}
    sub = RawSubscription(
        standin.address, {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
    )
    framework_id = sub.next_event()["subscribed"]["framework_id"]["value"]
    revive = {"type": "REVIVE", "framework_id": {"value": framework_id}}
    assert sub.call(revive, stream_id="")[0] == 400  # no Mesos-Stream-Id
    assert sub.call(revive, stream_id=str(uuid.uuid4()))[0] == 400  # someone else's
    short_uuid = base64.b64encode(b"four").decode()
    ack = {
        "type": "ACKNOWLEDGE",
        "framework_id": {"value": framework_id},
        "acknowledge": {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": short_uuid},
    }
    assert sub.call(ack)[0] == 400
    assert sub.call(revive)[0] == 202
    sub.close()

    # Once the stream is gone the framework is disconnected: 403 until it re-subscribes.
    wait_for(
        lambda: not standin.framework_state(framework_id)["connected"],  # type: ignore[index]
        10,
        message="framework disconnected",
    )
    assert sub.call(revive)[0] == 403


def test_bad_credentials_get_401_and_good_ones_subscribe(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin("--credentials", "alice:s3cret")
    for auth in (None, "Basic " + base64.b64encode(b"alice:wrong").decode()):
        headers = {"Authorization": auth} if auth else {}
        sub = RawSubscription(standin.address, SUBSCRIBE, headers)
        assert sub.status == 401
        assert sub.headers["WWW-Authenticate"] == 'Basic realm="mesos-master-scheduler"'
        sub.close()
    assert standin.request("GET", "/version")[0] == 200  # pymesos asks without credentials

    framework = Framework(standin.address, principal="alice", secret="s3cret")
    try:
        framework.start()
        state = standin.framework_state(framework.id)
        assert state is not None and state["principal"] == "alice"
    finally:
        framework.stop()


def test_declined_offers_stay_filtered_for_refuse_seconds_until_revive(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler(refuse_s=1.0)
    framework = make_framework(scheduler)
    wait_for(lambda: len(scheduler.offer_times) >= 3, 10, message="three offers")
    with scheduler.cond:
        times = list(scheduler.offer_times)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Offers come every 0.1 s; a 1 s filter spaces them by at least ~1 s.
    assert all(gap >= 0.9 for gap in gaps), gaps

    scheduler.refuse_s = 3600.0
    count = len(scheduler.offers)
    wait_for(lambda: len(scheduler.offers) > count, 5, message="the offer declined for an hour")
    count = len(scheduler.offers)
    revived_at = time.monotonic()
    framework.driver.reviveOffers()
    wait_for(lambda: len(scheduler.offers) > count, 5, message="an offer after REVIVE")
    assert scheduler.offer_times[-1] - revived_at < 0.9


def test_suppressed_frameworks_get_no_offers_until_revive(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler(refuse_s=0.0)
    framework = make_framework(scheduler)
    wait_for(lambda: scheduler.offers, 10, message="an offer")
    framework.driver.suppressOffers()
    # Events are ordered on the stream: once this reconciliation answer is in, every offer
    # made before SUPPRESS has arrived too.
    framework.driver.reconcileTasks([{"task_id": {"value": "marker"}}])
    scheduler.wait_state("marker", "TASK_LOST")
    count = len(scheduler.offers)
    with scheduler.cond:
        got_more = scheduler.cond.wait_for(lambda: len(scheduler.offers) > count, timeout=1.0)
    assert not got_more, "offers kept coming while suppressed"
    framework.driver.reviveOffers()
    wait_for(lambda: len(scheduler.offers) > count, 5, message="offers after REVIVE")


def test_heartbeats_follow_subscribed_and_repeat_at_the_interval(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin("--heartbeat-interval-seconds", "0.3")
    sub = RawSubscription(standin.address, SUBSCRIBE)
    try:
        subscribed = sub.next_event()
        assert subscribed["subscribed"]["heartbeat_interval_seconds"] == 0.3
        assert sub.next_event() == {"type": "HEARTBEAT"}
        first = time.monotonic()
        sub.next_of("HEARTBEAT")
        assert time.monotonic() - first >= 0.2
    finally:
        sub.close()
