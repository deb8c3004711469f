"""Announce the stand-in as the leading Mesos master in ZooKeeper, as Mesos does.

A Mesos master contends by creating an EPHEMERAL|SEQUENCE znode `json.info_<seq>` under the
path of the `zk://` URL, holding its MasterInfo as JSON; pymesos's detector takes the lowest
sequence and reads `address.ip` / `address.port` from it. kazoo is untyped, so its
`Any` stays inside this module.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kazoo.client import KazooClient

from .protocol import Json

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ZkUrl:
    hosts: str
    path: str

    @staticmethod
    def parse(url: str) -> ZkUrl:
        """`zk://host:port[,host:port]/path` (or `zoo://`). Raises ValueError."""
        parts = urlsplit(url)
        if parts.scheme not in ("zk", "zoo") or not parts.netloc:
            raise ValueError(f"not a zk:// URL: {url!r}")
        if "@" in parts.netloc:
            raise ValueError("ZooKeeper credentials in the URL are not supported")
        path = parts.path.rstrip("/") or "/mesos"
        return ZkUrl(parts.netloc, path)


class ZkAnnouncer:
    """Holds the ephemeral `json.info_` node while the stand-in runs."""

    def __init__(self, url: str, master_info: Json) -> None:
        self._url = ZkUrl.parse(url)
        self._master_info = master_info
        self._client: Any = None
        self.node: str | None = None

    def start(self) -> str:
        """Connect and create the node; returns its path. Blocks up to 15 s; raises on failure."""
        client = KazooClient(hosts=self._url.hosts)
        client.start(timeout=_CONNECT_TIMEOUT_S)
        self._client = client
        client.ensure_path(self._url.path)
        node: str = client.create(
            f"{self._url.path}/json.info_",
            json.dumps(self._master_info).encode("utf-8"),
            ephemeral=True,
            sequence=True,
        )
        self.node = node
        log.info("zk: announced master as %s on %s", node, self._url.hosts)
        return node

    def reannounce(self, master_info: Json) -> None:
        """A master failover: the old master's node goes (its session would end with it) and the
        new master's is created, with a higher sequence. Blocks on two ZooKeeper calls; called
        outside the state lock. Does nothing once stopped."""
        client = self._client
        if client is None:
            return
        if self.node is not None:
            client.delete(self.node)
            self.node = None
        self._master_info = master_info
        node: str = client.create(
            f"{self._url.path}/json.info_",
            json.dumps(master_info).encode("utf-8"),
            ephemeral=True,
            sequence=True,
        )
        self.node = node
        log.info("zk: announced the new master as %s", node)

    def stop(self) -> None:
        """Delete the node and close the session (the node would expire with it anyway)."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self.node is not None:
                client.delete(self.node)
        except Exception:
            log.warning("zk: could not delete %s", self.node, exc_info=True)
        finally:
            client.stop()
            client.close()
