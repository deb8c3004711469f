"""The replica's WSGI front called directly (no socket): the edge checks run first, in order.

`ReplicaHttp` builds its server without starting it, so requests are plain WSGI calls here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from scheduler.edge.http import DIRECT_SCHEME_KEY, ReplicaHttp, http_edge, redirect_location
from scheduler.model.errors import SettingsError
from scheduler.model.settings import load_settings

PORT = 8899


class _Recorder:
    """Stands for the mounted API: records the environ it was called with."""

    def __init__(self) -> None:
        self.environ: dict[str, Any] | None = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.environ = dict(environ)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]


def _front(**settings: str) -> tuple[ReplicaHttp, _Recorder, list[dict[str, Any]]]:
    checked: list[dict[str, Any]] = []

    def authorized(environ: Any) -> bool:
        checked.append(environ)
        return True

    edge = http_edge(load_settings({"hostname": "sched-a.example", **settings}, {}, {}))
    front = ReplicaHttp(
        "127.0.0.1",
        PORT,
        health=lambda: {"reason": None, "role": "leader", "identity": f"sched-a.example:{PORT}"},
        metrics=CollectorRegistry(),
        leader_address=lambda: None,
        is_acting_leader=lambda: True,
        authorized=authorized,
        replicas=lambda: ("sched-b.example:9000",),
        edge=edge,
    )
    api = _Recorder()
    front.mount_api(api)
    return front, api, checked


def _call(
    front: ReplicaHttp, path: str, host: str | None, **extra: str
) -> tuple[int, dict[str, str], bytes]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_URI": path,
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        **extra,
    }
    if host is not None:
        environ["HTTP_HOST"] = host
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    body = b"".join(front(environ, start_response))
    return got["status"], got["headers"], body


@pytest.mark.parametrize("path", ["/health", "/metrics", "/", "/api/job/jobs", "/nowhere"])
def test_a_foreign_host_is_refused_before_credentials_are_looked_at(path: str) -> None:
    front, api, checked = _front()
    status, headers, body = _call(front, path, "evil.example:8899")
    assert status == 421
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["type"] == "MisdirectedRequest"
    assert checked == [] and api.environ is None


def test_vouched_identities_and_configured_names_are_served() -> None:
    front, api, _ = _front(http_allowed_hosts="ejcloud.example.com")
    for host in ("sched-b.example:9000", "ejcloud.example.com", f"sched-a.example:{PORT}"):
        assert _call(front, "/api/job/jobs", host)[0] == 200
    assert api.environ is not None and api.environ[DIRECT_SCHEME_KEY] == "http"


def test_health_is_no_store() -> None:
    front, _, _ = _front()
    status, headers, _ = _call(front, "/health", "localhost")
    assert (status, headers["Cache-Control"]) == (200, "no-store")


def test_only_a_trusted_peer_sets_the_scheme_and_the_client_address() -> None:
    front, api, _ = _front(http_trusted_proxies="10.0.0.5")
    headers = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_FOR": "198.51.100.4"}
    _call(front, "/api/job/jobs", "localhost", REMOTE_ADDR="10.0.0.6", **headers)
    assert api.environ is not None
    assert (api.environ["wsgi.url_scheme"], api.environ["REMOTE_ADDR"]) == ("http", "10.0.0.6")
    _call(front, "/api/job/jobs", "localhost", REMOTE_ADDR="10.0.0.5", **headers)
    assert (api.environ["wsgi.url_scheme"], api.environ["REMOTE_ADDR"]) == (
        "https",
        "198.51.100.4",
    )
    assert api.environ["ejcloud.peer_address"] == "10.0.0.5"
    assert api.environ[DIRECT_SCHEME_KEY] == "http"


def test_a_standby_redirects_with_the_scheme_it_serves_itself() -> None:
    environ: dict[str, Any] = {"PATH_INFO": "/api/app/list", "QUERY_STRING": "a=1"}
    assert redirect_location("10.0.0.7:8899", environ) == "http://10.0.0.7:8899/api/app/list?a=1"
    environ[DIRECT_SCHEME_KEY] = "https"
    environ["wsgi.url_scheme"] = "http"
    assert redirect_location("10.0.0.7:8899", environ).startswith("https://10.0.0.7:8899/")


def test_an_unusable_certificate_is_a_settings_error_naming_the_key(tmp_path: Any) -> None:
    settings = load_settings({"http_tls_cert_file": str(tmp_path / "absent.pem")}, {}, {})
    with pytest.raises(SettingsError) as caught:
        http_edge(settings)
    assert "http_tls_cert_file" in caught.value.problems
    assert "absent.pem" in caught.value.message
