"""The container image for real: built with podman, two scheduler replicas run from it.

The images are built as `./dev.sh image` builds them (`deploy.image.build`), on a Debian base
made here without a registry (`local_base`: mmdebstrap into `podman import`, reused while its
recipe stays; the scheduler image's layers stay cached while the lock and the sources do). The
replicas are started as Marathon would start the container form of the app: the definition
comes from the Marathon template (`marathon.template.render` with `container_image`), and each
replica is `podman run` of its image with its `cmd` under `/bin/sh -c` (what the Docker
containerizer does with a shell command), its `env`, its secrets as podman secrets delivered in
the variables the definition names, and Marathon's `HOST`/`PORT0` on the host's network. Only
the two addresses that differ on this machine (ZooKeeper and the Mesos stand-in on 127.0.0.1,
which the template refuses for a cluster) replace the definition's.

ZooKeeper and the Mesos stand-in (with its agents, which run the job's command tasks) run on the
host. Skipped only where podman cannot run at all; podman, buildah, runc and mmdebstrap are
installed with apt when missing (as `./dev.sh test` does).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from deploy.image import build as image_build
from deploy.zookeeper import ZooKeeperEnsemble, free_port
from marathon.template import AppSpec, render
from tests.support.http import exchange
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

_TOOLS = ("podman", "buildah", "runc", "mmdebstrap")
_LABEL = "ejcloud-test=container-image"
_REPOSITORY = "localhost/ejcloud-test"
_SECRET_PREFIX = "ejcloud-test-"
_ADMIN_PASSWORD = "container-Adm1n-pw"
# Where the (test's) secret store holds each secret the definition names.
_SECRET_SOURCES = {
    "auth_admin_password_hash": "/ejcloud/admin_password_hash",
    "auth_guest_password_hash": "/ejcloud/guest_password_hash",
    "zk_digest": "/ejcloud/zk_digest",
}
_RECORD_SH = """#!/bin/sh
echo "start $EJC_SHARDING_ITEM $(date +%s.%N)" >> "{out}"
"""


def _ensure_tools() -> None:
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.skip(f"podman cannot run here: {', '.join(missing)} missing and not root")
    for args in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", *_TOOLS],
    ):
        done = subprocess.run(
            args,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"podman cannot run here: {' '.join(args)} failed: {done.stderr[-400:]}")


def _podman(
    env: Mapping[str, str], *args: str, check: bool = True, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", *args], env=dict(env), capture_output=True, text=True, timeout=timeout_s
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done


def _pid_alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def _sweep(env: Mapping[str, str]) -> None:
    """Remove the containers and secrets an earlier run of this test left (killed mid-way):
    those whose test process (its pid, in a label and in the secret's name) is gone. Another
    run's, going on at the same time, are left alone."""
    found = _podman(
        env, "ps", "-a", "--filter", f"label={_LABEL}",
        "--format", '{{.ID}} {{index .Labels "ejcloud-test-pid"}}', check=False,
    )  # fmt: skip
    ids = [
        line.split()[0]
        for line in found.stdout.splitlines()
        if line.strip() and not _pid_alive([*line.split(), ""][1])
    ]
    if ids:
        _podman(env, "rm", "-f", "-t", "0", *ids, check=False)
    secrets = _podman(env, "secret", "ls", "--format", "{{.Name}}", check=False).stdout.split()
    stale = [
        name
        for name in secrets
        if name.startswith(_SECRET_PREFIX)
        and not _pid_alive(name.removeprefix(_SECRET_PREFIX).split("-")[0])
    ]
    if stale:
        _podman(env, "secret", "rm", *stale, check=False)


def _drop_older_versions(env: Mapping[str, str], current: set[str]) -> None:
    """Remove this test's images of earlier versions (each version is a tag of its own)."""
    listed = _podman(env, "images", "--format", "{{.Repository}}:{{.Tag}}", check=False)
    stale = [
        ref
        for ref in listed.stdout.split()
        if ref.startswith(f"{_REPOSITORY}-") and ref not in current and not ref.endswith(":latest")
    ]
    if stale:
        _podman(env, "rmi", *stale, check=False)


@dataclass
class Images:
    env: dict[str, str]
    scheduler: str
    executor: str
    seconds: float


@pytest.fixture
def images() -> Images:
    _ensure_tools()
    env = image_build.podman_env()
    info = subprocess.run(["podman", "info"], env=env, capture_output=True, text=True)
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: podman info: {info.stderr.strip()[-400:]}")
    _sweep(env)
    started = time.monotonic()
    base = image_build.local_base(env=env)
    built = image_build.build(base, repository=_REPOSITORY, env=env)
    _drop_older_versions(env, set(built.values()))
    return Images(env, built["scheduler"], built["executor"], time.monotonic() - started)


@dataclass
class Replica:
    name: str
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def health(self) -> dict[str, Any] | None:
        try:
            answer = exchange("GET", f"http://{self.address}/health", timeout_s=2)
            if 200 <= answer.status < 300:
                found: dict[str, Any] = json.loads(answer.body)
                return found
            body: dict[str, Any] = json.loads(answer.body or b"null") or {}
            return body
        except (OSError, ValueError):
            return None


@dataclass
class Cluster:
    env: dict[str, str]
    app: dict[str, Any]
    tmp: Path
    replicas: list[Replica] = field(default_factory=list)

    def leader(self) -> Replica | None:
        leaders = [r for r in self.replicas if (r.health() or {}).get("role") == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def api(
        self,
        replica: Replica,
        method: str,
        path: str,
        body: Any = None,
        password: str = _ADMIN_PASSWORD,
    ) -> tuple[int, Any]:
        token = base64.b64encode(f"root:{password}".encode()).decode()
        answer = exchange(
            method,
            f"http://{replica.address}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        )
        if 200 <= answer.status < 300:
            return answer.status, answer.json()
        return answer.status, answer.body.decode(errors="replace")

    def logs(self) -> str:
        parts = []
        for replica in self.replicas:
            done = _podman(self.env, "logs", "--tail", "40", replica.name, check=False)
            parts.append(f"--- {replica.name} ---\n{done.stdout}{done.stderr}")
        return "\n".join(parts)


def _run_args(
    app: dict[str, Any],
    name: str,
    port: int,
    local: Mapping[str, str],
    secret_names: Mapping[str, str],
) -> list[str]:
    """`podman run` of one instance of the container form `app`, as the Docker containerizer
    starts it: Marathon's HOST/PORT0, the app's env (with the `local` addresses), each secret
    reference delivered in its variable, host networking, `cmd` under /bin/sh -c."""
    container = app["container"]
    assert container["type"] == "DOCKER" and app["networks"] == [{"mode": "host"}]
    args = ["run", "-d", "--name", name, "--label", _LABEL, "--network", "host"]
    args += ["--label", f"ejcloud-test-pid={os.getpid()}"]
    args += ["--env", "HOST=127.0.0.1", "--env", f"PORT0={port}", "--env", f"PORTS={port}"]
    args += ["--env", f"MARATHON_APP_ID={app['id']}"]
    for key, value in app["env"].items():
        if isinstance(value, dict):
            source = app["secrets"][value["secret"]]["source"]
            args += ["--secret", f"{secret_names[source]},type=env,target={key}"]
        else:
            args += ["--env", f"{key}={local.get(key, value)}"]
    return [*args, "--entrypoint", "/bin/sh", container["docker"]["image"], "-c", app["cmd"]]


@pytest.fixture
def cluster(
    images: Images, zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> Iterator[Cluster]:
    env = images.env
    digest = f"ejcloud:{uuid.uuid4().hex}"
    store = {
        "/ejcloud/admin_password_hash": generate_password_hash(_ADMIN_PASSWORD),
        "/ejcloud/guest_password_hash": generate_password_hash(uuid.uuid4().hex),
        "/ejcloud/zk_digest": digest,
    }
    spec = AppSpec(
        zk_servers="zk1.example:2181",
        mesos_url="zk://zk1.example:2181/mesos",
        artifact_url="",
        container_image=images.scheduler,
        env={
            "zk_namespace": zk_namespace,
            "zk_session_timeout_seconds": "4",
            "leader_retry_backoff_seconds": "0.5",
        },
        secrets=_SECRET_SOURCES,
    )
    app = render(spec)
    mesos = StandIn(tmp_path / "mesos", "--agents", "2", "--allocation-interval-seconds", "0.5")
    mesos.start()
    run = uuid.uuid4().hex[:8]
    secret_names: dict[str, str] = {}
    cluster = Cluster(env, app, tmp_path)
    try:
        for source, value in store.items():
            name = f"{_SECRET_PREFIX}{os.getpid()}-{run}-{source.rsplit('/', 1)[1]}"
            subprocess.run(
                ["podman", "secret", "create", name, "-"],
                input=value, env=env, text=True, capture_output=True, check=True,
            )  # fmt: skip
            secret_names[source] = name
        local = {"zk_servers": zk.hosts, "mesos_url": mesos.address}
        for n in range(2):
            replica = Replica(f"ejcloud-test-{run}-{n}", free_port())
            _podman(env, *_run_args(app, replica.name, replica.port, local, secret_names))
            cluster.replicas.append(replica)
        yield cluster
    finally:
        print(cluster.logs())
        names = [r.name for r in cluster.replicas]
        if names:
            _podman(env, "rm", "-f", "-t", "0", *names, check=False)
        if secret_names:
            _podman(env, "secret", "rm", *secret_names.values(), check=False)
        mesos.stop()


def _app_archive(tmp: Path, runs: Path) -> Path:
    src = tmp / "app-src"
    src.mkdir()
    (src / "record.sh").write_text(_RECORD_SH.format(out=runs))
    archive = tmp / "app.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "record.sh", arcname="record.sh")
    return archive


def _starts(runs: Path) -> list[float]:
    if not runs.exists():
        return []
    return [float(line.split()[2]) for line in runs.read_text().splitlines() if line]


def _check_image_metadata(images: Images) -> None:
    """Version label, non-root user, health check, stop signal; the executor's entry point."""
    print(f"images built in {images.seconds:.1f} s")
    for ref in (images.scheduler, images.executor):
        inspected = json.loads(_podman(images.env, "image", "inspect", ref).stdout)[0]
        config = inspected["Config"]
        assert config["Labels"]["org.opencontainers.image.version"] == image_build.version()
        assert config["User"] == "10001:10001"
    scheduler = json.loads(_podman(images.env, "image", "inspect", images.scheduler).stdout)[0]
    assert scheduler["Config"]["Entrypoint"] == ["/opt/ejcloud/bin/ejcloud-scheduler"]
    assert scheduler["Healthcheck"]["Test"] == ["CMD", "python3", "/opt/ejcloud/healthcheck.py"]
    assert scheduler["Config"]["StopSignal"] in ("SIGTERM", "15")
    # The executor's entry point is the real one: outside a Mesos agent it says so and exits.
    done = _podman(images.env, "run", "--rm", images.executor, check=False)
    assert done.returncode == 2
    assert "started by a Mesos agent" in done.stderr + done.stdout


def _healthy(env: Mapping[str, str], name: str) -> bool:
    return _podman(env, "healthcheck", "run", name, check=False).returncode == 0


def _connected_leader(cluster: Cluster, other_than: str = "") -> Replica:
    def found() -> Replica | None:
        leader = cluster.leader()
        if leader is None or leader.name == other_than:
            return None
        health = leader.health() or {}
        return leader if health.get("mesos") == "connected" else None

    return wait_for(found, 60, 0.2, message=f"a leader connected to Mesos\n{cluster.logs()}")


def test_two_replicas_from_the_image_elect_run_a_job_and_hand_over_on_sigterm(
    images: Images, cluster: Cluster
) -> None:
    """One test (one build, on one worker): the images, then the replicas run from them."""
    _check_image_metadata(images)
    leader = _connected_leader(cluster)
    (standby,) = [r for r in cluster.replicas if r is not leader]
    wait_for(
        lambda: (standby.health() or {}).get("leader") == leader.address,
        30,
        0.2,
        message="the standby knows the leader",
    )
    # The image's HEALTHCHECK passes on both (run by hand: podman's timers need systemd). Its
    # 5 s timeout covers a python3 start under podman exec, which a loaded machine can exceed
    # once: as with the check's retries, a later pass counts.
    for replica in cluster.replicas:
        wait_for(
            partial(_healthy, cluster.env, replica.name),
            30,
            0.5,
            message=f"the image's health check passing on {replica.name}",
        )
    # The secrets arrived: the default login is refused, the stored hash's password accepted.
    assert cluster.api(leader, "GET", "/api/job/jobs", password="root")[0] == 401
    assert cluster.api(leader, "GET", "/api/job/jobs")[0] == 200
    runs = cluster.tmp / "record.runs"
    archive = _app_archive(cluster.tmp, runs)
    status, body = cluster.api(
        leader,
        "POST",
        "/api/app",
        {
            "appName": "container_app",
            "appURL": str(archive),
            "bootstrapScript": "true",
            "cpuCount": 0.1,
            "memoryMB": 32,
        },
    )
    assert status == 204, body
    job = {
        "jobName": "from_the_image",
        "appName": "container_app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh record.sh",
        "cron": "0/2 * * * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
    }
    status, body = cluster.api(leader, "POST", "/api/job/register", job)
    assert status == 204, body
    wait_for(lambda: _starts(runs), 40, 0.2, message=f"a run of the job\n{cluster.logs()}")

    # SIGTERM to the leader's container: it hands over and exits 0; the standby leads and the
    # job goes on running.
    stop = _podman(cluster.env, "stop", "-t", "30", leader.name, timeout_s=60)
    assert stop.returncode == 0
    state = json.loads(_podman(cluster.env, "inspect", leader.name).stdout)[0]["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0), cluster.logs()
    stopped_at = time.time()
    new_leader = _connected_leader(cluster, other_than=leader.name)
    assert new_leader is standby
    wait_for(
        lambda: [t for t in _starts(runs) if t > stopped_at],
        40,
        0.2,
        message=f"a run under the new leader\n{cluster.logs()}",
    )
