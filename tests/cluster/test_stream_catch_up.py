"""A lagging stream replica catches up over the routes (cluster/catch_up.py).

Three in-process servers meshed by real route connections (tests/server/test_route_interest.py's
mesh: real RouteManagers, RouteConnections and parsers, in-memory pipes, no sockets), a replicated
Stream on each (file store in a temp dir, durable RAFT log on a SimDisk) whose group talks over
RouteRaftTransport + GroupRegistry, and a RouteCatchUp per server. Each server's loop is a
hand-cranked SimHost; time is a ManualClock."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

from appliance.clock import ManualClock
from appliance.cluster.catch_up import RouteCatchUp
from appliance.cluster.catch_up_codec import PART_HEAD_BYTES, Request, encode_msgs, encode_request
from appliance.cluster.group import RaftGroup
from appliance.cluster.raft_storage import DurableStorage
from appliance.cluster.registry import GroupRegistry
from appliance.cluster.route_transport import RouteRaftTransport, peer_token
from appliance.jetstream import ops
from appliance.jetstream.config import parse_stream_config
from appliance.jetstream.groups import Replication
from appliance.jetstream.stream import Stream, store_limits
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, RaftConfig
from appliance.store.api import StoredMsg
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.testing.sim.disk import SimDisk
from appliance.testing.sim.streams import SimHost
from tests.server.test_route_interest import Cluster as RouteMesh

GROUP = "S-route"
TICK_S = 0.05


class Node:
    def __init__(self, mesh: RouteMesh, index: int, voters: tuple[str, ...], clock: ManualClock,
                 root: Path, *, batch_bytes: int, snapshot_entries: int, config: Any,
                 disk: SimDisk | None = None) -> None:
        server = mesh.servers[index]
        self.name = server.options.server_name
        self.peer = peer_token(self.name)
        self.host = SimHost(self.name, clock, random.Random(index))
        self.transport = RouteRaftTransport(server, self.peer)
        self.registry = GroupRegistry(self.transport)
        self.transport.attach(self.registry)
        self.catch_up = RouteCatchUp(server, self.peer, self.host, batch_bytes=batch_bytes)
        self.catch_up.serve(self.registry)
        self.disk = disk if disk is not None else SimDisk()  # a restart finds its RAFT log here
        storage = DurableStorage(self.disk, "log", bootstrap=ConfState(voters))
        self.store = FileStreamStore(FileStoreConfig(str(root / self.name), limits=store_limits(config)))
        replication = Replication(storage=storage, transport=self.registry.outbox(GROUP), tick_s=TICK_S,
                                  snapshot_entries=snapshot_entries, catch_up=self.catch_up.source(GROUP))
        self.stream = Stream(config=config, created_ns=1, store=self.store, host=self.host, peer=self.peer,
                             group_id=GROUP, replication=replication)
        self.registry.add(self.stream.group)

    def stop(self, *, kill: bool) -> None:
        """The server's JetStream goes away: cleanly (the stream closes, fsyncing what it holds)
        or killed (the RAFT log loses what was not fsynced; the store keeps what it wrote)."""
        if kill:
            self.stream.deleted = True
            self.disk.crash(random.Random(0), torn=False)
        else:
            self.stream.close()
        self.catch_up.close()
        self.transport.close()

    def acks(self) -> dict[bytes, bytes]:
        return {reply: body for reply, body in self.host.sent if reply.startswith(b"r.")}


class Servers:
    def __init__(self, root: Path, *, batch_bytes: int = 8 * 1024, snapshot_entries: int = 4) -> None:
        self.mesh = RouteMesh()
        self.clock = ManualClock()
        base = parse_stream_config({"name": "S", "subjects": ["s.>"]})
        config = dataclasses.replace(base, num_replicas=3)
        self.voters = tuple(sorted(peer_token(s.options.server_name) for s in self.mesh.servers))
        self.root, self.config = root, config
        self.batch_bytes, self.snapshot_entries = batch_bytes, snapshot_entries
        self.nodes = [self.node(i) for i in range(3)]
        self.down: set[int] = set()

    def node(self, index: int, disk: SimDisk | None = None) -> Node:
        return Node(self.mesh, index, self.voters, self.clock, self.root, batch_bytes=self.batch_bytes,
                    snapshot_entries=self.snapshot_entries, config=self.config, disk=disk)

    def stop(self, index: int, *, kill: bool) -> None:
        self.nodes[index].stop(kill=kill)
        self.down.add(index)
        self.settle()

    def start(self, index: int) -> Node:
        """Start server `index`'s stream again on its store directory and its RAFT log."""
        self.down.discard(index)
        self.nodes[index] = self.node(index, self.nodes[index].disk)
        return self.nodes[index]

    def up(self) -> list[Node]:
        return [n for i, n in enumerate(self.nodes) if i not in self.down]

    def settle(self) -> None:
        for _ in range(500):
            busy = False
            for node in self.up():
                busy |= node.host.turn()
            received = sum(n.transport.received for n in self.nodes)
            self.mesh.pump()
            if not busy and received == sum(n.transport.received for n in self.nodes):
                return
        raise AssertionError("the servers never went quiet")

    def step(self) -> None:
        self.clock.advance(TICK_S)
        for node in self.up():
            node.registry.tick()
        self.settle()

    def run_until(self, condition: Any, ticks_max: int = 2_000) -> None:
        for _ in range(ticks_max):
            if condition():
                return
            self.step()
        raise AssertionError("condition not reached")

    def leader(self) -> Node:
        self.run_until(lambda: sum(n.stream.group.is_leader() for n in self.up()) == 1)
        return next(n for n in self.up() if n.stream.group.is_leader())


def contents(node: Node) -> tuple[object, list[StoredMsg]]:
    state = node.store.state(with_deleted=True)
    msgs = [node.store.load(seq) for seq in range(state.first_seq, state.last_seq + 1)]
    return state, [m for m in msgs if m is not None]


def test_a_cut_off_replica_catches_up_over_the_routes_from_a_snapshot_in_bounded_batches(tmp_path: Path) -> None:
    async def scenario() -> None:
        servers = Servers(tmp_path)
        await servers.mesh.start()
        leader = servers.leader()
        lagging = next(n for n in servers.nodes if n is not leader)
        index = servers.nodes.index(lagging)
        servers.mesh.isolate(index)
        total = 600
        big = bytes(random.Random(1).randbytes(20_000))  # larger than one 8 KiB reply: goes in parts
        for number in range(total):
            payload = b"%d-" % number + b"x" * (100 + number % 150)
            header = b"NATS/1.0\r\nNats-Msg-Id: big\r\n\r\n" if number == 300 else b""
            leader.stream.publish_raw("s.%d" % (number % 7), b"r.%d" % number, header, big if number == 300 else payload)
            if number % 50 == 49:
                servers.step()
        servers.run_until(lambda: len(leader.acks()) == total)
        deleted: list[object] = []  # a hole the lagging replica must keep
        leader.stream.propose_op(ops.KIND_DELETE, {"seq": 3, "erase": False}, deleted.append)
        servers.run_until(lambda: deleted == [True])
        assert leader.stream.group.storage.snapshot().meta.index > 0  # compacted past the lagging one
        assert lagging.store.state().last_seq == 0
        servers.mesh.rejoin(index)
        servers.run_until(lambda: lagging.store.state().last_seq == total)
        for number in range(3):  # and it goes on with the stream after the snapshot
            leader.stream.publish_raw("s.x", b"r.after.%d" % number, b"", b"after %d" % number)
        servers.run_until(lambda: all(n.store.state().last_seq == total + 3 for n in servers.nodes))
        expected = contents(leader)
        assert len(expected[1]) == total + 2
        assert all(contents(n) == expected for n in servers.nodes)
        fetcher, served = lagging.catch_up, sum(n.catch_up.served for n in servers.nodes)
        served_bytes = sum(n.catch_up.served_bytes for n in servers.nodes)
        assert served_bytes > 3 * 20_000  # the big message and many batches came over the routes
        assert max(n.catch_up.reply_bytes_largest for n in servers.nodes) <= 8 * 1024  # each bounded
        assert fetcher.requested >= served_bytes // (8 * 1024)
        assert served >= fetcher.requested - fetcher.timeouts - 1 and fetcher.in_flight() == 0
        assert fetcher.dropped_corrupt == 0 and fetcher.parts_received >= 3  # the big one came in parts

    asyncio.run(scenario())


class Provider:
    """A group state machine serving a fixed store (what a replicated Stream offers)."""

    def __init__(self, msgs: list[StoredMsg], *, holds: bool = True) -> None:
        self.msgs, self.holds = msgs, holds

    def apply(self, entries: object) -> None:
        pass

    def applied_index(self) -> int:
        return 0

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass

    def catch_up_batch(self, from_seq: int, to_seq: int, max_msgs: int, max_bytes: int) -> list[StoredMsg] | None:
        if not self.holds:
            return None
        return [m for m in self.msgs if from_seq <= m.seq <= to_seq][:max_msgs]


class Pair:
    """Two RouteCatchUps on a route mesh; host 1 serves group G from a Provider."""

    def __init__(self, provider: Provider) -> None:
        self.mesh = RouteMesh()
        self.clock = ManualClock()
        self.hosts = [SimHost(f"h{i}", self.clock, random.Random(i)) for i in range(3)]
        self.peers = [peer_token(s.options.server_name) for s in self.mesh.servers]
        self.catch_ups = [RouteCatchUp(s, p, h) for s, p, h in zip(self.mesh.servers, self.peers, self.hosts)]
        registry = GroupRegistry(RouteRaftTransport(self.mesh.servers[1], self.peers[1]))
        registry.add(RaftGroup(group_id="G", config=RaftConfig(id=self.peers[1]),
                               storage=MemoryStorage(ConfState((self.peers[1],))), transport=registry.outbox("G"),
                               state_machine=provider, clock=self.clock, rng=random.Random(1)))
        self.catch_ups[1].serve(registry)
        self.got: list[list[StoredMsg] | None] = []

    def black_hole(self) -> None:
        """Host 2 takes requests for its peer id and never answers."""
        self.catch_ups[2].client.subscribe(b"$ACATCHUP.%s.>" % self.peers[2].encode(), lambda *_: None)
        self.settle()

    def fetch(self, from_seq: int, to_seq: int) -> None:
        self.catch_ups[0].source("G").fetch(self.peers[1], from_seq, to_seq, self.got.append)

    def settle(self) -> None:
        for _ in range(50):
            self.mesh.pump()
            if not any(h.turn() for h in self.hosts):
                return


MSGS = [StoredMsg(seq, "s.a", b"", b"p%d" % seq, seq) for seq in range(1, 11)]


def test_a_fetch_gets_the_range_and_an_unheld_range_is_unavailable() -> None:
    async def scenario() -> None:
        pair = Pair(Provider(MSGS))
        await pair.mesh.start()
        pair.fetch(3, 6)
        pair.settle()
        assert pair.got == [MSGS[2:6]]
        pair2 = Pair(Provider(MSGS, holds=False))
        await pair2.mesh.start()
        pair2.fetch(3, 6)
        pair2.settle()
        assert pair2.got == [None]

    asyncio.run(scenario())


def test_no_answer_times_out_and_an_unreachable_leader_fails_at_once() -> None:
    async def scenario() -> None:
        pair = Pair(Provider(MSGS))
        await pair.mesh.start()
        pair.catch_ups[1].client.close()  # the leader's host stops answering (its interest is gone)
        pair.settle()
        pair.fetch(1, 5)
        pair.settle()
        assert pair.got == [None] and pair.catch_ups[0].requested == 1  # nobody to ask: failed soon
        pair.got.clear()
        pair.black_hole()
        pair.catch_ups[0].source("G").fetch(peer_token("h2"), 1, 5, pair.got.append)
        pair.settle()
        assert pair.got == []  # asked; no answer yet
        pair.clock.advance(3.0)
        pair.settle()
        assert pair.got == [None] and pair.catch_ups[0].timeouts == 1
        assert pair.catch_ups[0].in_flight() == 0

    asyncio.run(scenario())


def test_a_new_fetch_of_the_same_group_supersedes_the_one_in_flight() -> None:
    async def scenario() -> None:
        pair = Pair(Provider(MSGS))
        await pair.mesh.start()
        pair.black_hole()
        old: list[object] = []
        pair.catch_ups[0].source("G").fetch(peer_token("h2"), 1, 5, old.append)  # never answered
        pair.fetch(1, 2)
        pair.settle()
        pair.clock.advance(3.0)
        pair.settle()
        assert pair.got == [MSGS[:2]] and old == [] and pair.catch_ups[0].superseded == 1

    asyncio.run(scenario())


def test_hostile_and_stale_replies_fail_the_fetch_cleanly() -> None:
    async def scenario() -> None:
        pair = Pair(Provider(MSGS))
        await pair.mesh.start()
        fetcher = pair.catch_ups[0]
        own = pair.peers[0].encode()
        injector = pair.catch_ups[2].client  # a third host publishes forged replies
        pair.black_hole()
        fetcher.source("G").fetch(peer_token("h2"), 1, 5, pair.got.append)  # never answered by h2
        nonce = fetcher.requested
        injector.publish(b"$ACATCHUPR.%s.G.%d" % (own, nonce + 7), b"\x01\x00\x00\x00\x00\x00")  # stale
        pair.settle()
        assert pair.got == [] and fetcher.dropped_stale == 1
        injector.publish(b"$ACATCHUPR.%s.G.%d" % (own, nonce), b"\x01\x00\xff\xff\xff\xff junk")
        pair.settle()
        assert pair.got == [None] and fetcher.dropped_corrupt == 1
        pair.got.clear()
        fetcher.source("G").fetch(peer_token("h2"), 1, 5, pair.got.append)
        out_of_range = StoredMsg(9, "s.a", b"", b"x", 1)
        injector.publish(b"$ACATCHUPR.%s.G.%d" % (own, fetcher.requested), encode_msgs([out_of_range]))
        pair.settle()
        assert pair.got == [None] and fetcher.dropped_corrupt == 2
        # garbage requests to a server are dropped, never answered with a crash
        pair2 = Pair(Provider(MSGS))
        await pair2.mesh.start()
        server = pair2.catch_ups[1]
        pair2.catch_ups[2].client.publish(b"$ACATCHUP.%s.G.x" % pair2.peers[1].encode(), b"garbage", reply=b"r")
        pair2.catch_ups[2].client.publish(b"$ACATCHUP.%s.G.x" % pair2.peers[1].encode(),
                                          encode_request(Request(1, 2, 1, 100)))  # no reply subject
        pair2.settle()
        assert server.dropped_corrupt == 2 and server.served == 0

    asyncio.run(scenario())


def test_a_message_larger_than_one_reply_comes_in_parts() -> None:
    async def scenario() -> None:
        big = StoredMsg(4, "s.big", b"NATS/1.0\r\nA: b\r\n\r\n", bytes(range(256)) * 40, 7)
        pair = Pair(Provider([*MSGS[:3], big, *MSGS[4:]]))
        pair.catch_ups[1].reply_bytes_max = 1000
        await pair.mesh.start()
        pair.fetch(1, 10)
        pair.settle()
        assert pair.got == [MSGS[:3]]
        pair.got.clear()
        pair.fetch(4, 10)
        pair.settle()
        assert pair.got == [[big]]
        room = 1000 - PART_HEAD_BYTES - len(b"s.big")
        assert pair.catch_ups[0].requested == 1 + -(-len(big.headers + big.payload) // room)
        assert pair.catch_ups[1].reply_bytes_largest <= 1000

    asyncio.run(scenario())


def test_restarted_replicas_and_a_killed_leader_catch_up_over_the_routes_without_duplicates(tmp_path: Path) -> None:
    """Stop a follower, write on (the leader compacts past it), start it again on its store and
    RAFT log: it re-applies only what its store lacks and fetches the rest over the routes. Then
    kill the leader under the same rules. Replicas end identical, every message once."""
    async def scenario() -> None:
        servers = Servers(tmp_path)
        await servers.mesh.start()
        leader = servers.leader()

        def publish(node: Node, numbers: range) -> None:
            for number in numbers:
                node.stream.publish_raw("s.%d" % (number % 5), b"r.%d" % number, b"", b"m%d" % number)
            servers.run_until(lambda: all(b"r.%d" % n in node.acks() for n in numbers))

        publish(leader, range(200))
        stopped = next(i for i, n in enumerate(servers.nodes) if n is not leader)
        servers.run_until(lambda: servers.nodes[stopped].store.state().last_seq == 200)
        servers.stop(stopped, kill=False)  # down while the leader writes on
        for chunk in range(200, 500, 50):
            publish(leader, range(chunk, chunk + 50))
        assert leader.stream.group.storage.snapshot().meta.index > 0  # compacted past it
        back = servers.start(stopped)
        assert back.store.state().last_seq == 200  # its own messages, none applied twice
        servers.run_until(lambda: back.store.state().last_seq == 500)
        assert back.catch_up.requested > 0  # it fetched what the snapshot stands for
        killed = servers.nodes.index(leader)
        servers.stop(killed, kill=True)
        new = servers.leader()
        publish(new, range(500, 550))
        servers.start(killed)
        everyone = servers.nodes
        servers.run_until(lambda: all(n.store.state().last_seq == 550 for n in everyone))
        expected = contents(everyone[killed])
        assert [m.payload for m in expected[1]] == [b"m%d" % n for n in range(550)]
        assert all(contents(n) == expected for n in everyone)

    asyncio.run(scenario())
