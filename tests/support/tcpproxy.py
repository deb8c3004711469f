"""A TCP proxy on loopback that a test can cut and restore, to partition one ZooKeeper client."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble, free_port


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target`. `cut()` drops every connection and then holds new
    ones silently (no bytes forwarded), as a network partition would; `cut(silent=True)` leaves
    the open connections open but forwards nothing more either way, as a partition that drops
    packets does (the client notices only by its own timeouts); `restore()` forwards again.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._cut = False
        self._silent = False  # open connections forward nothing (cut(silent=True))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="test-tcpproxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if self._cut:
                    self._pairs.append((client, None))  # held, never answered
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=2)
                except OSError:
                    client.close()
                    continue
                self._pairs.append((client, upstream))
            threading.Thread(
                target=self._pump, args=(client, upstream), name="test-tcpproxy-pump", daemon=True
            ).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select([a, b], [], [], 0.1)
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    if not self._silent:
                        (b if src is a else a).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                if (a, b) in self._pairs:
                    self._pairs.remove((a, b))
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def connections(self) -> int:
        """How many connections it forwards now (held ones are not counted)."""
        with self._lock:
            return sum(1 for _, upstream in self._pairs if upstream is not None)

    def _drop_all(self) -> None:
        for client, upstream in self._pairs:
            for s in (client, upstream):
                if s is None:
                    continue
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        self._pairs.clear()

    def cut(self, silent: bool = False) -> None:
        with self._lock:
            self._cut = True
            if silent:
                self._silent = True
            else:
                self._drop_all()

    def inject(self, data: bytes) -> int:
        """Send `data` to every forwarded client as if the target had sent it, then hold new
        connections (as `cut` does, but the current ones stay open). Returns how many clients
        got it. The bytes go between two forwarded chunks only if the target is quiet then.
        """
        with self._lock:
            sent = 0
            for client, upstream in self._pairs:
                if upstream is None:
                    continue
                try:
                    client.sendall(data)
                except OSError:
                    continue
                sent += 1
            self._cut = True
            return sent

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            self._silent = False
            self._drop_all()  # held connections were never answered: let the client retry

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            self._drop_all()
        self._thread.join(2)


@contextmanager
def proxied_client(
    zk: ZooKeeperEnsemble, timeout_s: float
) -> Iterator[tuple[TcpProxy, KazooClient]]:
    """A started kazoo client (session timeout `timeout_s`) that reaches `zk`'s first server
    through a `TcpProxy` the test can cut; both closed at the end of the block."""
    host, port = zk.servers[0].address.split(":")
    proxy = TcpProxy(host, int(port))
    client = KazooClient(hosts=proxy.address, timeout=timeout_s)
    try:
        client.start(timeout=15)
        yield proxy, client
    finally:
        proxy.close()
        client.stop()
        client.close()
