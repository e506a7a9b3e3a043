"""Route partitions for process tests: every route of a local cluster goes through a proxy of ours,
and `isolate(node)` cuts that node off from every other one.

Node i reaches node j through its own proxy port (i, j) (servers.RouteWiring.dial), so each route
link, whichever side dialled it, crosses exactly one proxy that knows both ends. A cut is a
black hole, not a reset: the proxies stop moving bytes both ways (the kernel buffers fill, writers
block) and connections made meanwhile wait too; on `heal` the bytes held flow again, late and in
order, as TCP delivers them after a network partition heals. Whatever a node does meanwhile (its
ping timeout closing the route, a new dial) is its own business.

Gossiped routes (a node dialling the `ip` another's INFO advertises) would bypass the proxies, so
each node advertises a port nobody listens on: every route is a configured one, through a proxy.
Clients still reach an isolated node directly (its client port is not proxied): the interesting
case of a minority leader that clients keep publishing to.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterable

from appliance.bench.servers import RouteWiring, free_port

POLL_S = 0.05
CHUNK_BYTES = 65_536
ACCEPT_BACKLOG = 16


class Partitions:
    """The proxies of an `nodes`-node cluster and which nodes are cut off now."""

    def __init__(self, nodes: int) -> None:
        self.isolated: set[int] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.cluster_ports = tuple(free_port() for _ in range(nodes))
        self._proxies = {(i, j): _LinkProxy(self, (i, j), self.cluster_ports[j])
                         for i in range(nodes) for j in range(nodes) if i != j}
        self.wiring = RouteWiring(self.cluster_ports, {link: p.port for link, p in self._proxies.items()},
                                  {i: free_port() for i in range(nodes)})

    def isolate(self, node: int) -> None:
        with self._lock:
            self.isolated.add(node)

    def heal(self) -> None:
        with self._lock:
            self.isolated.clear()

    def passes(self, ends: Iterable[int]) -> bool:
        with self._lock:
            return not self.isolated.intersection(ends)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def idle(self) -> None:
        """A proxy thread's wait while its link is cut (ends early when the proxies close)."""
        self._closed.wait(POLL_S)

    def close(self) -> None:
        self._closed.set()
        for proxy in self._proxies.values():
            proxy.close()


class _LinkProxy:
    """One listening port forwarding to one node's route port, for the link (from, to)."""

    def __init__(self, net: Partitions, ends: tuple[int, int], target_port: int) -> None:
        self.net = net
        self.ends = ends
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=ACCEPT_BACKLOG)
        self.listener.settimeout(POLL_S * 4)
        self.port = int(self.listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"route-proxy-{ends}", daemon=True).start()

    def _accept(self) -> None:
        while not self.net.closed:
            try:
                inbound, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._connect, args=(inbound,), daemon=True).start()

    def _connect(self, inbound: socket.socket) -> None:
        while not self.net.passes(self.ends):  # a dial during the cut waits, as a SYN is retried
            if self.net.closed:
                inbound.close()
                return
            self.net.idle()
        try:
            outbound = socket.create_connection(("127.0.0.1", self.target_port), timeout=2.0)
        except OSError:
            inbound.close()  # the node is down: the dialler sees its connection closed
            return
        with self._lock:
            if self.net.closed:  # closed while we dialled: close() has run, nobody else will
                inbound.close()
                outbound.close()
                return
            self._sockets += [inbound, outbound]
        for src, dst in ((inbound, outbound), (outbound, inbound)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.net.closed:
                if not self.net.passes(self.ends):
                    self.net.idle()
                    continue
                readable, _, _ = select.select([src], [], [], POLL_S)
                if not readable or not self.net.passes(self.ends):  # cut while we waited: read nothing
                    continue
                data = src.recv(CHUNK_BYTES)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """After Partitions.close set `closed`: no socket is added once this has run."""
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.close()
                except OSError:
                    pass
