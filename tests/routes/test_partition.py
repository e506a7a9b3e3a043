"""Route faults beyond a kill: a partition healed (a black-holing TCP proxy on the route between two
nodes), a silent peer dropped as stale after ping_max unanswered PINGs (compared with nats-server),
`no_advertise` (compared with nats-server), and a restart of a worker that does not hold the routes."""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import signal
import socket
import threading
import time
from pathlib import Path

import nats
import psutil
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from appliance.testing.clients import flush_after_subs
from appliance.testing.process import ApplianceProcess, free_port
from tests.routes.conftest import Node, make_node, routed, run, wait_until

pytestmark = pytest.mark.integration

FAST_PINGS = "  ping_interval: \"250ms\"\n  ping_max: 2\n"  # stale after ~1 s + 2 x 250 ms
MESSAGES = 300


class PartitionProxy:
    """A TCP proxy on 127.0.0.1 in front of one route port. `cut()` partitions: bytes in flight are
    dropped both ways (the connections stay open, as when packets are lost) and new connections get
    nowhere; `heal()` closes what was accepted during the cut and forwards again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.cut_now = False
        self.held: list[socket.socket] = []
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.sockets.append(client)
                if self.cut_now:
                    self.held.append(client)
                    threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                    continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        try:
            while data := source.recv(65536):
                if sink is not None and not self.cut_now:
                    sink.sendall(data)
        except OSError:
            pass
        # during the cut an end's close is lost like its data: the other end must find out by itself
        for each in (source,) if self.cut_now else (source, sink):
            if each is not None:
                try:
                    each.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.cut_now = True

    def heal(self) -> None:
        with self.lock:
            self.cut_now = False
            for sock in self.held:
                sock.close()
            self.held.clear()

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                sock.close()


def test_a_partitioned_node_comes_back_with_its_interest_and_nothing_twice(tmp_path: Path,
                                                                            cluster_nodes: list[Node]) -> None:
    ports = {"p1": free_port(), "p2": free_port()}
    n2 = make_node(tmp_path, "p2", "appliance", ports, routes=[], cluster_extra=FAST_PINGS)
    proxy = PartitionProxy(ports["p2"])
    n1 = make_node(tmp_path, "p1", "appliance", {**ports, "proxy": proxy.port}, routes=["proxy"],
                   cluster_extra=FAST_PINGS)
    for node in (n2, n1):
        cluster_nodes.append(node.start())

    async def scenario() -> None:
        c1, c2 = await nats.connect(n1.url), await nats.connect(n2.url)
        old = await c2.subscribe("before")
        await flush_after_subs(c2)
        await routed(c1, c2)
        await routed(c2, c1)
        proxy.cut()
        wait_until(lambda: "Stale Connection" in n1.log() and "Stale Connection" in n2.log(),
                   "both sides drop the silent route", 20)
        # interest changes on both sides while they cannot see each other
        await old.unsubscribe()
        plain: collections.Counter[bytes] = collections.Counter()
        queue: collections.Counter[bytes] = collections.Counter()
        back: collections.Counter[bytes] = collections.Counter()

        async def count(into: collections.Counter[bytes], msg: Msg) -> None:
            into[msg.data] += 1

        await c2.subscribe("after", cb=functools.partial(count, plain))
        await c2.subscribe("after", queue="q", cb=functools.partial(count, queue))
        await c1.subscribe("back", cb=functools.partial(count, back))
        await flush_after_subs(c1)
        await flush_after_subs(c2)
        created = n1.log().count("route connection created")
        proxy.heal()
        wait_until(lambda: n1.log().count("route connection created") > created, "the route back after healing")
        await routed(c1, c2)
        await routed(c2, c1)
        for i in range(MESSAGES):
            await c1.publish("after", b"%d" % i)
            await c2.publish("back", b"%d" % i)
        await c1.flush()
        await c2.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while (len(plain) < MESSAGES or len(queue) < MESSAGES or len(back) < MESSAGES) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert len(plain) == len(queue) == len(back) == MESSAGES
        assert set(plain.values()) == set(queue.values()) == set(back.values()) == {1}
        with pytest.raises(NoRespondersError):  # the interest dropped during the partition is gone
            await c1.request("before", b"", timeout=5)
        await c1.close()
        await c2.close()

    try:
        run(scenario)
    finally:
        proxy.close()


ROUTE_PEER = b'CONNECT {"cluster":"C1","name":"SILENT","headers":true}\r\n' \
             b'INFO {"server_id":"SILENT","server_name":"silent","cluster":"C1","headers":true}\r\n'


@pytest.mark.parametrize("kind", ["appliance", "go"])
def test_a_route_peer_that_stops_answering_pings_is_dropped_after_ping_max(tmp_path: Path,
                                                                          cluster_nodes: list[Node],
                                                                          kind: str) -> None:
    ports = {"s1": free_port()}
    node = make_node(tmp_path, "s1", kind, ports, routes=[], cluster_extra=FAST_PINGS, workers=1)
    cluster_nodes.append(node.start())
    with socket.create_connection(("127.0.0.1", ports["s1"])) as sock:
        sock.settimeout(10)
        sock.sendall(ROUTE_PEER)
        started = time.monotonic()
        data = b""
        while chunk := sock.recv(65536):  # never a PONG from us
            data += chunk
        closed_after = time.monotonic() - started
    assert b"-ERR 'Stale Connection'\r\n" in data
    assert data.count(b"PING\r\n") >= 2  # at least ping_max PINGs unanswered before it closes
    assert closed_after < 5
    wait_until(lambda: "Stale Connection" in node.log(), "the log line", 5)


def client_info(port: int) -> dict[str, object]:
    import json

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        line = sock.makefile("rb").readline()
    return json.loads(line[5:])  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["appliance", "go"])
def test_no_advertise_keeps_connect_urls_out_of_client_info(tmp_path: Path, cluster_nodes: list[Node],
                                                            kind: str) -> None:
    ports = {"a1": free_port(), "a2": free_port(), "a3": free_port()}
    nodes = [make_node(tmp_path, "a1", kind, ports, routes=[], cluster_extra="  no_advertise: true\n"),
             make_node(tmp_path, "a2", kind, ports, routes=["a1"]),
             make_node(tmp_path, "a3", kind, ports, routes=["a1", "a2"])]
    for node in nodes:
        cluster_nodes.append(node.start())

    async def mesh() -> None:
        clients = [await nats.connect(node.url) for node in nodes]
        for a in clients:
            for b in clients:
                if a is not b:
                    await routed(a, b)
        for c in clients:
            await c.close()

    run(mesh)
    url = {node.name: f"127.0.0.1:{node.client_port}" for node in nodes}
    wait_until(lambda: sorted(client_info(nodes[1].client_port).get("connect_urls") or []) ==
               sorted([url["a2"], url["a3"]]), "a2's clients told of a3 and itself, never a1")
    assert sorted(client_info(nodes[2].client_port).get("connect_urls") or []) == sorted([url["a2"], url["a3"]])
    assert "connect_urls" not in client_info(nodes[0].client_port)  # a1 tells its own clients nothing


def test_restart_of_a_worker_that_holds_no_route(tmp_path: Path, cluster_nodes: list[Node]) -> None:
    """Worker 1 of n1 is killed: its clients' interest leaves the peer (no responders, not a timeout),
    the survivors on worker 0 miss nothing, and clients of the restarted worker 1 are reached again."""
    ports = {"w1": free_port(), "w2": free_port()}
    n1 = make_node(tmp_path, "w1", "appliance", ports, routes=["w2"])
    n2 = make_node(tmp_path, "w2", "appliance", ports, routes=[])
    for node in (n1, n2):
        cluster_nodes.append(node.start())
    assert isinstance(n1.process, ApplianceProcess) and n1.process.process is not None
    workers = sorted(psutil.Process(n1.process.process.pid).children(), key=lambda p: p.create_time())

    async def connect_on(worker: int) -> nats.NATS:
        deadline = time.monotonic() + 30  # a worker still starting (a loaded machine) takes none yet
        while time.monotonic() < deadline:
            nc = await nats.connect(n1.url, allow_reconnect=False)
            if (int(nc._server_info["client_id"]) - 1) % 2 == worker:
                return nc
            await nc.close()
            await asyncio.sleep(0.02)
        raise AssertionError(f"no connection landed on worker {worker}")

    async def scenario() -> None:
        c2 = await nats.connect(n2.url)
        on0, on1 = await connect_on(0), await connect_on(1)
        async def alive(msg: Msg) -> None:
            await on1.publish(msg.reply, b"alive")

        await on1.subscribe("doomed", cb=alive)
        got: collections.Counter[bytes] = collections.Counter()

        async def keep(msg: Msg) -> None:
            got[msg.data] += 1

        await on0.subscribe("kept", cb=keep)
        for nc in (on0, on1):
            await flush_after_subs(nc)
            await routed(c2, nc)
        target = workers_serving(workers, on1)
        os.kill(target, signal.SIGKILL)
        half = MESSAGES // 2
        for i in range(half):
            await c2.publish("kept", b"%d" % i)
        await c2.flush()
        wait_until(lambda: len(psutil.Process(n1.process.process.pid).children()) == 2  # type: ignore[union-attr]
                   and target not in [p.pid for p in psutil.Process(n1.process.process.pid).children()],  # type: ignore[union-attr]
                   "the supervisor restarts the worker", 30)
        deadline = time.monotonic() + 20
        while True:  # the dead worker's interest leaves n2: no responders, not a timeout
            try:
                await c2.request("doomed", b"", timeout=2)
            except NoRespondersError:
                break
            except TimeoutError:
                pass
            assert time.monotonic() < deadline, "the dead worker's interest stayed on n2"
            await asyncio.sleep(0.1)
        fresh = await connect_on(1)
        async def again(msg: Msg) -> None:
            await fresh.publish(msg.reply, b"again")

        await fresh.subscribe("doomed", cb=again)
        await flush_after_subs(fresh)
        await routed(c2, fresh)
        assert (await c2.request("doomed", b"", timeout=5)).data == b"again"
        for i in range(half, MESSAGES):
            await c2.publish("kept", b"%d" % i)
        await c2.flush()
        deadline = time.monotonic() + 20
        while len(got) < MESSAGES and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert len(got) == MESSAGES and set(got.values()) == {1}
        for nc in (c2, on0, fresh):
            await nc.close()

    run(scenario)


def workers_serving(workers: list[psutil.Process], nc: nats.NATS) -> int:
    """The pid of the worker process holding `nc`'s connection (the server end of its socket)."""
    local = nc._transport._io_writer.get_extra_info("sockname")[1]  # type: ignore[union-attr]
    for process in workers:
        for conn in process.net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == local:
                return process.pid
    raise AssertionError("no worker holds the connection")
