"""What an operator must know about a replica's set-up, logged at start and shown in `/health`."""

from __future__ import annotations

import re
from collections.abc import Mapping

from scheduler.model.errors import SettingsError
from scheduler.model.settings import Settings

# Set (to 1) by deploy/cluster.py for the replicas of the local development cluster: together
# with a ZooKeeper on loopback only, it silences the missing-zk_digest warning there.
DEV_CLUSTER_ENV = "EJCLOUD_DEV_CLUSTER"
_LOOPBACK_HOSTS = re.compile(r"^(localhost|127\.\d+\.\d+\.\d+|\[?::1\]?)$")


def in_dev_cluster(settings: Settings, environ: Mapping[str, str]) -> bool:
    """Whether this replica runs in the local development cluster (`./dev.sh run`).

    Only when deploy/cluster.py said so in the environment and every ZooKeeper server is on
    loopback, where nobody but this machine's users can write the election.
    """
    if environ.get(DEV_CLUSTER_ENV) != "1":
        return False
    hosts = settings.zk_servers.split("/", 1)[0].split(",")
    return all(_LOOPBACK_HOSTS.fullmatch(h.strip().rsplit(":", 1)[0]) for h in hosts if h.strip())


def startup_warnings(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """What an operator must know about this replica's set-up (log at start, `/health`).

    Raises SettingsError when `require_zk_digest` is on without `zk_digest`.
    """
    if settings.zk_digest:
        return []
    if settings.require_zk_digest:
        raise SettingsError(
            {"require_zk_digest": "is true but zk_digest is not set; set zk_digest (user:password)"}
        )
    if in_dev_cluster(settings, environ):
        return []
    return [
        f"zk_digest is not set: every node under /{settings.zk_namespace} is world-writable, so "
        "anyone who reaches ZooKeeper can rewrite jobs (and so run code on the agents) and add "
        "election members; leaders are then trusted only after they prove they share this "
        "cluster's settings. Set zk_digest (and require_zk_digest=true) in production"
    ]
