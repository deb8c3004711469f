"""Create or update the app, wait for its deployment, and find out which instance leads."""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from marathon.client import MarathonClient
from marathon.errors import DeploymentTimeout, NoLeader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instance:
    """One running task: where it listens and what its `/health` said."""

    address: str  # host:port
    role: str  # "leader", "standby", or "unreachable: <why>"
    leader: str | None  # whom it names as leader


@dataclass(frozen=True)
class Deployment:
    app_id: str
    deployment_id: str | None
    instances: tuple[Instance, ...]

    @property
    def leader(self) -> str | None:
        leaders = [i.address for i in self.instances if i.role == "leader"]
        return leaders[0] if leaders else None


def _healthy_addresses(app: dict[str, Any]) -> list[str]:
    addresses = []
    for task in app.get("tasks") or []:
        results = task.get("healthCheckResults") or []
        ports = task.get("ports") or []
        if results and ports and all(r.get("alive") for r in results):
            addresses.append(f"{task.get('host')}:{ports[0]}")
    return sorted(addresses)


def _health(
    address: str, timeout_s: float, scheme: str = "http", tls: ssl.SSLContext | None = None
) -> Instance:
    url = f"{scheme}://{address}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=tls) as answer:
            body = json.loads(answer.read())
        return Instance(address, str(body.get("role")), body.get("leader"))
    except (OSError, ValueError, AttributeError) as exc:
        return Instance(address, f"unreachable: {exc}", None)


def try_logins(
    address: str,
    logins: Sequence[tuple[str, str]],
    timeout_s: float,
    scheme: str = "http",
    tls: ssl.SSLContext | None = None,
) -> dict[tuple[str, str], str]:
    """Try each (user, password) on the REST API at `address`; map it to what happened.

    The outcome is "accepted" (2xx), "refused" (401, 403 or 429) or "unknown: <why>". Blocks
    for at most `timeout_s` per login. `scheme` "https" (`tls`: the CAs trusted; None: the
    system's) when the replicas serve TLS.
    """
    outcomes: dict[tuple[str, str], str] = {}
    for user, password in logins:
        request = urllib.request.Request(f"{scheme}://{address}/api/job/jobs")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=tls) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except OSError as exc:
            outcomes[(user, password)] = f"unknown: {exc}"
            continue
        if 200 <= status < 300:
            outcomes[(user, password)] = "accepted"
        elif status in (401, 403, 429):
            outcomes[(user, password)] = "refused"
        else:
            outcomes[(user, password)] = f"unknown: HTTP {status}"
    return outcomes


@dataclass(frozen=True)
class Deployer:
    """Runs one deployment; `deploy` blocks until it is done or `timeout_s` has passed."""

    client: MarathonClient
    timeout_s: float = 600.0
    poll_interval_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # "https" when the replicas serve TLS (http_tls_cert_file); `tls`: the CAs their
    # certificates are verified against (None: the system's store).
    scheme: str = "http"
    tls: ssl.SSLContext | None = None

    def _until(self, deadline: float, what: str, check: Callable[[], bool]) -> None:
        while not check():
            if self.clock() >= deadline:
                raise DeploymentTimeout(f"{what} after {self.timeout_s:g}s (see --timeout)")
            self.sleep(self.poll_interval_s)

    def deploy(self, app: dict[str, Any]) -> Deployment:
        """Create or update `app` and wait until it runs healthy and one instance leads.

        Raises MarathonUnreachable, DefinitionRejected, DeploymentTimeout or NoLeader.
        """
        deadline = self.clock() + self.timeout_s
        app_id = str(app["id"])
        want = int(app["instances"])
        deployment_id = self.client.create_or_update(app)
        log.info("app %s: deployment %s started", app_id, deployment_id)

        def finished() -> bool:
            running = self.client.deployments_of(app_id)
            if running:
                log.info("app %s: waiting for deployment %s", app_id, ", ".join(running))
            return not running

        self._until(deadline, f"deployment of {app_id} did not finish", finished)
        healthy: list[str] = []

        def all_healthy() -> bool:
            nonlocal healthy
            current = self.client.app(app_id)
            healthy = _healthy_addresses(current)
            reported = current.get("tasksHealthy")
            count = reported if isinstance(reported, int) else len(healthy)
            log.info("app %s: %s of %s instances healthy", app_id, count, want)
            return count >= want and len(healthy) >= want

        self._until(deadline, f"app {app_id} did not get {want} healthy instances", all_healthy)
        instances: tuple[Instance, ...] = ()

        def one_leads() -> bool:
            nonlocal instances
            request_timeout_s = max(0.5, min(5.0, deadline - self.clock()))
            instances = tuple(_health(a, request_timeout_s, self.scheme, self.tls) for a in healthy)
            return any(i.role == "leader" for i in instances)

        try:
            self._until(deadline, "no leader", one_leads)
        except DeploymentTimeout as exc:
            roles = ", ".join(f"{i.address} {i.role}" for i in instances)
            raise NoLeader(
                f"app {app_id} is healthy but no instance reports role leader after "
                f"{self.timeout_s:g}s ({roles}): check the Mesos master and ZooKeeper settings"
            ) from exc
        return Deployment(app_id, deployment_id, instances)
