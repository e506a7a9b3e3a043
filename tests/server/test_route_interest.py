"""The interest and forwarding rules of routes (spec/cluster-and-routes.md §4) against a naive oracle.

Three servers in one process, fully meshed by route connections over in-memory transports (the real
RouteConnection, parser and RouteManager; no sockets, no clock): random subscriptions (plain and
queue, wildcards), unsubscriptions and publishes on any server. The oracle is the definition: every
matching plain subscription anywhere gets a message once, every queue group (by name) with a
matching member anywhere gets it once, and the publisher's server sees a delivery iff anything
matched (no-responders otherwise)."""

from __future__ import annotations

import asyncio
import collections

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.config.options import ClusterOptions, ServerOptions
from appliance.fabric.route import RouteConnection
from appliance.protocol.subjects import subject_matches
from appliance.server.internal import InternalClient
from appliance.server.routes import RouteManager
from appliance.server.server import Server
from appliance.server.sublist import Subscription

HOSTS = 3


class MemoryTransport:
    """What RouteConnection needs of a transport; bytes written wait in `out` for the pump."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.out += data

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Cluster:
    def __init__(self) -> None:
        self.servers = []
        self.managers = []
        self.pipes: list[tuple[MemoryTransport, RouteConnection]] = []  # bytes written on t go to conn
        for i in range(HOSTS):
            options = ServerOptions(server_name=f"h{i}", cluster=ClusterOptions(name="C1", port=-1))
            server = Server(options, server_id=f"ID{i}", start_wall_s=0.0)
            self.servers.append(server)
            self.managers.append(RouteManager(server))
        self.publishers = [InternalClient(s, s.global_account(), "pub") for s in self.servers]
        self.subscribers = [InternalClient(s, s.global_account(), "sub") for s in self.servers]

    async def start(self) -> None:
        for manager in self.managers:
            await manager.start(None)
        for i in range(HOSTS):
            for j in range(i + 1, HOSTS):
                self.connect(i, j)
        self.pump()
        assert all(len(m.peers) == HOSTS - 1 for m in self.managers)

    def connect(self, i: int, j: int) -> None:
        """A route from host i to host j (call pump() to run the handshake)."""
        dialler = self.managers[i]._new_connection(solicited=True)
        acceptor = self.managers[j]._new_connection(solicited=False)
        ti, tj = MemoryTransport(), MemoryTransport()
        self.pipes += [(ti, acceptor), (tj, dialler)]
        acceptor.connection_made(tj)  # type: ignore[arg-type]
        dialler.connection_made(ti)  # type: ignore[arg-type]

    def isolate(self, i: int) -> None:
        """Close every route of host i (both ends); bytes still in flight on them are lost."""
        server_id = self.servers[i].server_id
        for k, manager in enumerate(self.managers):
            for peer in list(manager.peers.values()):
                if k == i or peer.conn.remote_id == server_id:
                    peer.conn.close("test")
        self.pipes = [(t, c) for t, c in self.pipes if not t.closed and not c.closed]
        self.pump()

    def rejoin(self, i: int) -> None:
        """Reconnect host i to every other host."""
        for j in range(HOSTS):
            if j != i:
                self.connect(i, j)
        self.pump()

    def pump(self) -> None:
        for _ in range(1000):
            for server in self.servers:
                server.flush_dirty()
            moved = False
            for transport, conn in self.pipes:
                if transport.out:
                    data = bytes(transport.out)
                    transport.out.clear()
                    conn.data_received(data)
                    moved = True
            if not moved:
                return
        raise AssertionError("routes never went quiet")


subject_tokens = st.sampled_from([b"a", b"b", b"c"])
subjects = st.lists(subject_tokens, min_size=1, max_size=3).map(b".".join)
patterns = st.lists(st.one_of(subject_tokens, st.just(b"*")), min_size=1, max_size=3).map(b".".join) | \
    st.lists(subject_tokens, min_size=0, max_size=2).map(lambda t: b".".join([*t, b">"]))
operation = st.one_of(
    st.tuples(st.just("sub"), st.integers(0, HOSTS - 1), patterns, st.none() | st.sampled_from([b"q1", b"q2"])),
    st.tuples(st.just("unsub"), st.integers(0, 50)),
    st.tuples(st.just("pub"), st.integers(0, HOSTS - 1), subjects),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, min_size=1, max_size=30), st.integers(0, 2**32))
def test_route_forwarding_matches_the_oracle(ops: list[tuple[object, ...]], seed: int) -> None:
    async def scenario() -> None:
        cluster = Cluster()
        for server in cluster.servers:
            server.rng.seed(seed)
        await cluster.start()
        live: list[tuple[int, Subscription]] = []
        got: collections.Counter[Subscription] = collections.Counter()
        for n, op in enumerate(ops):
            if op[0] == "sub":
                _, host, pattern, queue = op
                client = cluster.subscribers[host]  # type: ignore[index]
                box: list[Subscription] = []
                sub = client.subscribe(pattern, lambda s, r, h, d, box=box: got.update([box[0]]), queue=queue)  # type: ignore[arg-type]
                box.append(sub)
                live.append((host, sub))  # type: ignore[arg-type]
            elif op[0] == "unsub":
                if live:
                    host, sub = live.pop(op[1] % len(live))  # type: ignore[operator]
                    cluster.subscribers[host].unsubscribe(sub)
            else:
                _, host, subject = op
                got.clear()
                delivered = cluster.publishers[host].publish(subject, b"m%d" % n)  # type: ignore[index,str-bytes-safe]
                cluster.pump()
                matching = [sub for _, sub in live if subject_matches(sub.subject, subject)]  # type: ignore[arg-type]
                plain = [sub for sub in matching if sub.queue is None]
                groups = {sub.queue for sub in matching if sub.queue is not None}
                assert all(got[sub] == 1 for sub in plain), "a plain subscriber missed or doubled"
                for group in groups:
                    assert sum(got[sub] for sub in matching if sub.queue == group) == 1, f"group {group!r}"
                assert sum(got.values()) == len(plain) + len(groups), "a delivery nobody should have had"
                assert (delivered > 0) == bool(matching), "no-responders iff nothing anywhere matched"
            cluster.pump()

    asyncio.run(scenario())


def test_interest_lines_follow_the_counts() -> None:
    """RS+ on 0→1 and RS- on 1→0 per (account, subject); queue RS+ re-sent with every member count."""
    async def scenario() -> None:
        cluster = Cluster()
        await cluster.start()
        sent: list[bytes] = []
        transport = next(t for t, conn in cluster.pipes if conn.settings.server_id == "ID1")
        client = cluster.subscribers[0]
        subs = [client.subscribe(b"x.y", lambda *a: None) for _ in range(2)]
        qs = [client.subscribe(b"w.*", lambda *a: None, queue=b"g") for _ in range(2)]
        for server in cluster.servers:
            server.flush_dirty()
        sent.append(bytes(transport.out))
        for sub in [*subs, *qs]:
            client.unsubscribe(sub)
        for server in cluster.servers:
            server.flush_dirty()
        sent.append(bytes(transport.out)[len(sent[0]):])
        assert sent[0] == b"RS+ $G x.y\r\nRS+ $G w.* g 1\r\nRS+ $G w.* g 2\r\n"
        assert sent[1] == b"RS- $G x.y\r\nRS+ $G w.* g 1\r\nRS- $G w.* g\r\n"

    asyncio.run(scenario())
