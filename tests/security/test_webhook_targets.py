"""Webhooks that cannot reach inside, through the API on a real ZooKeeper: a job whose
`notifyWebhookUrl` points at loopback or a metadata service, in any spelling or through a name
that resolves there, is a 400 naming why, at registration and update, with nothing written;
`notify_webhook_allowed_targets` lets an operator allow an internal receiver. A guest sees only
`scheme://host[:port]/...` of a job's webhook, in every answer that carries the job."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.integration.api.conftest import APP, GUEST, JOB, Api, make_api

URL_KEY = "notifyWebhookUrl"
TOKEN_URL = "https://hooks.example.com:8443/services/T000/B000/s3cret?token=s3cret"

LOOPBACK_AND_METADATA = [
    "http://127.0.0.1:2181/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://0.0.0.0:8899/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://localhost/",
    "http://localhost./",
    "http://LOCALHOST/",
    "http://\u24dbocalhost/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://10.0.0.1:5050/master/state",
    "http://100.64.0.1/",
]


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield make_api(zk_client, zk_namespace)


@pytest.fixture
def mapped_names(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Host names resolved in this process to the address given (no /etc/hosts edit)."""
    mapped: dict[str, str] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host) not in mapped:
            return real(host, port, *args, **kwargs)
        address = mapped[str(host)]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port or 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return mapped


def register(api: Api, **job: Any) -> Any:
    return api.call("POST", "/api/job/register", {**JOB, **job})


@pytest.mark.parametrize("url", LOOPBACK_AND_METADATA)
def test_an_internal_webhook_is_refused_at_registration_and_update_writing_nothing(
    api: Api, url: str
) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    before = api.snapshot()
    refused = register(api, **{URL_KEY: url})
    assert refused.status_code == 400, refused.json
    assert refused.json["error"].startswith("invalid job: notifyWebhookUrl: refused: ")
    assert "allow it with notify_webhook_allowed_targets" in refused.json["error"]
    assert list(refused.json["fields"]) == [URL_KEY]
    assert api.snapshot() == before
    assert register(api).status_code == 204
    before = api.snapshot()
    update = api.call("PUT", "/api/job/update", {"jobName": JOB["jobName"], URL_KEY: url})
    assert update.status_code == 400 and "refused: " in update.json["error"]
    assert api.snapshot() == before


def test_a_name_that_resolves_inside_is_refused_and_one_that_does_not_resolve_is_judged_later(
    api: Api, mapped_names: dict[str, str]
) -> None:
    mapped_names["hooks.inside.test"] = "127.0.0.1"
    mapped_names["alerts.inside.test"] = "10.20.30.40"
    assert api.call("POST", "/api/app", APP).status_code == 204
    before = api.snapshot()
    for name, why in (
        ("hooks.inside.test", "hooks.inside.test resolves to 127.0.0.1, a loopback address"),
        ("alerts.inside.test", "alerts.inside.test resolves to 10.20.30.40, a private address"),
    ):
        refused = register(api, **{URL_KEY: f"https://{name}/hook"})
        assert refused.status_code == 400 and why in refused.json["error"], refused.json
    assert api.snapshot() == before
    # A name that does not resolve now is accepted: the leader judges it before every POST.
    assert register(api, **{URL_KEY: "https://no-such-host.invalid/hook"}).status_code == 204


def test_an_allowed_internal_target_is_accepted(
    zk_client: KazooClient, zk_namespace: str, mapped_names: dict[str, str]
) -> None:
    mapped_names["alerts.corp.test"] = "10.20.30.40"
    api = make_api(
        zk_client,
        zk_namespace,
        notify_webhook_allowed_targets="127.0.0.1/32, *.corp.test",
    )
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert register(api, **{URL_KEY: "http://127.0.0.1:9000/hook"}).status_code == 204
    update = {"jobName": JOB["jobName"], URL_KEY: "http://alerts.corp.test/hook"}
    assert api.call("PUT", "/api/job/update", update).status_code == 204
    refused = api.call("PUT", "/api/job/update", {**update, URL_KEY: "http://127.0.0.2/"})
    assert refused.status_code == 400


def test_a_guest_sees_only_the_webhooks_scheme_host_and_port(api: Api) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert register(api, **{URL_KEY: TOKEN_URL}).status_code == 204
    assert (
        register(api, jobName="other_job", **{URL_KEY: "http://8.8.8.8/h?k=v"}).status_code == 204
    )
    hidden = {"demo_job": "https://hooks.example.com:8443/...", "other_job": "http://8.8.8.8/..."}
    guest_answers = [
        [api.call("GET", "/api/job/jobs/demo_job", headers=GUEST).json],
        api.call("GET", "/api/job/jobs", headers=GUEST).json,
        api.call("GET", "/api/job/jobs?limit=1", headers=GUEST).json["items"],
    ]
    for answer in guest_answers:
        assert answer and all(job[URL_KEY] == hidden[job["jobName"]] for job in answer), answer
    guest_text = b"".join(
        api.call("GET", path, headers=GUEST).data
        for path in ("/api/job/jobs", "/api/job/jobs/demo_job", "/api/job/jobs?limit=5")
    )
    assert b"s3cret" not in guest_text and b"services" not in guest_text
    admin = api.call("GET", "/api/job/jobs/demo_job").json
    assert admin[URL_KEY] == TOKEN_URL
    assert {j["jobName"]: j[URL_KEY] for j in api.call("GET", "/api/job/jobs").json} == {
        "demo_job": TOKEN_URL,
        "other_job": "http://8.8.8.8/h?k=v",
    }
