"""The Marathon app of replicas that serve https (`http_tls_cert_file`): MESOS_HTTPS health
checks, and the deploy command polls the replicas over https, verifying their certificate
against --cacert (or the system's CAs)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from marathon.__main__ import main
from marathon.template import AppSpec, render
from tests.integration.marathon.fake_marathon import FakeReplica, MarathonState, Served
from tests.integration.marathon.test_deploy_command import _args

TLS_ENV = ["--env", "http_tls_cert_file=/etc/ejcloud/cert.pem"]


@pytest.fixture
def served() -> Iterator[Served]:
    servers = Served()
    yield servers
    servers.close()


def _spec(**env: str) -> AppSpec:
    return AppSpec(
        zk_servers="zk1:2181",
        mesos_url="zk://zk1:2181/mesos",
        artifact_url="https://files.example/ejcloud.tar.gz",
        env=env,
        secrets={"zk_digest": "/ejcloud/zk_digest"},
        insecure=True,
    )


def test_health_checks_are_mesos_https_when_the_replicas_serve_tls() -> None:
    plain = render(_spec())
    assert [c["protocol"] for c in plain["healthChecks"]] == ["MESOS_HTTP"]
    tls = render(_spec(http_tls_cert_file="/etc/ejcloud/cert.pem"))
    assert [c["protocol"] for c in tls["healthChecks"]] == ["MESOS_HTTPS"]
    # The same through the prefixed variable name; an empty value is no certificate.
    assert render(_spec(EJC_HTTP_TLS_CERT_FILE="/c.pem"))["healthChecks"][0]["protocol"] == (
        "MESOS_HTTPS"
    )
    assert render(_spec(http_tls_cert_file=" "))["healthChecks"][0]["protocol"] == "MESOS_HTTP"


def _tls_cluster(served: Served, certificate: tuple[Path, Path]) -> tuple[str, str]:
    """A fake Marathon whose two replicas serve only https; returns its url and the leader."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    replicas: list[FakeReplica] = []
    for role in ("leader", "standby"):
        replica = FakeReplica(role)
        replica.socket = context.wrap_socket(replica.socket, server_side=True)
        served._start(replica, f"fake-tls-{role}")
        replicas.append(replica)
    replicas[0].leader = replicas[1].leader = replicas[0].address
    state = MarathonState(task_addresses=[("127.0.0.1", r.server_address[1]) for r in replicas])
    return served.marathon(state), replicas[0].address


def test_the_deployer_polls_tls_replicas_over_https_with_the_given_ca(
    served: Served,
    certificate: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, leader = _tls_cluster(served, certificate)
    cacert = ["--cacert", str(certificate[0])]
    assert main(_args(url, *TLS_ENV, *cacert), environ={}) == 0
    out = capsys.readouterr().out
    assert f"instance {leader} leader" in out and f"\nleader {leader}\n" in out
    assert "default login" in out  # the login check reached the leader over https too


def test_a_certificate_the_ca_does_not_vouch_for_names_no_leader(
    served: Served,
    certificate: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _leader = _tls_cluster(served, certificate)
    # Without --cacert the system's CAs are used: the self-signed certificate is refused.
    assert main([*_args(url, *TLS_ENV), "--timeout", "1"], environ={}) == 1
    err = capsys.readouterr().err
    assert "no instance reports role leader" in err and "CERTIFICATE_VERIFY_FAILED" in err


def test_cacert_without_tls_is_refused(
    served: Served,
    certificate: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _args("http://127.0.0.1:1", "--dry-run", "--cacert", str(certificate[0]))
    assert main(args, environ={}) == 1
    assert "--cacert is for replicas that serve https" in capsys.readouterr().err
