"""RouteRaftTransport: RAFT groups on three in-process servers meshed by real route connections.

The servers, RouteManagers, RouteConnections and parsers are the real ones (tests/server/
test_route_interest.py's mesh over in-memory transports, no sockets); the groups' Ready loops run on
a hand-cranked loop and tick from a manual clock. RAFT traffic crosses the routes as system-account
messages on $ARAFT.<to>.<group>.<from>."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

import pytest

from appliance.clock import ManualClock, SystemClock
from appliance.cluster.group import RaftGroup
from appliance.cluster.raft_host import RaftHost
from appliance.cluster.registry import GroupRegistry
from appliance.cluster.route_transport import RouteRaftTransport, peer_token
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, Entry, HardState, RaftConfig
from tests.cluster.test_group_api import Loop, Machine
from tests.server.test_route_interest import Cluster as RouteMesh

GROUP = "_meta_"


def test_peer_tokens_are_nats_servers_peer_ids() -> None:
    assert [peer_token(name) for name in ("N1", "N2", "N3")] == ["xZ93l5JM", "gX64jrmD", "jaYVmptb"]  # spec §9.2


class SpyStorage(MemoryStorage):
    """A MemoryStorage that calls `on_sync` when it is asked to fsync entries."""

    def __init__(self, conf: ConfState) -> None:
        super().__init__(conf)
        self.on_sync: Callable[[], None] | None = None

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        if sync and entries and self.on_sync is not None:
            self.on_sync()
        super().save(hard_state, entries, sync=sync)


class Hosts:
    def __init__(self) -> None:
        self.mesh = RouteMesh()
        self.loop, self.clock = Loop(), ManualClock()
        self.peers = tuple(peer_token(s.options.server_name) for s in self.mesh.servers)
        self.transports = [RouteRaftTransport(s, p) for s, p in zip(self.mesh.servers, self.peers)]
        self.registries = [GroupRegistry(t) for t in self.transports]
        self.machines: list[Machine] = []
        self.groups: list[RaftGroup] = []
        for peer, transport, registry in zip(self.peers, self.transports, self.registries):
            transport.attach(registry)
            machine = Machine()
            group = RaftGroup(group_id=GROUP, config=RaftConfig(id=peer), storage=SpyStorage(ConfState(tuple(sorted(self.peers)))),
                              transport=registry.outbox(GROUP), state_machine=machine, clock=self.clock,
                              rng=random.Random(peer), scheduler=self.loop)
            registry.add(group)
            self.machines.append(machine)
            self.groups.append(group)

    def settle(self) -> None:
        for _ in range(200):
            self.loop.settle()
            before = sum(t.received for t in self.transports)
            self.mesh.pump()
            if not self.loop.soon and sum(t.received for t in self.transports) == before:
                if not self.loop.timers:
                    return
                self.loop.fire()  # time passes: a leader's held commit notices go out
        raise AssertionError("did not settle")

    def leader(self) -> RaftGroup:
        for _ in range(200):
            leaders = [g for g in self.groups if g.is_leader()]
            if len(leaders) == 1:
                return leaders[0]
            self.clock.advance(0.1)
            for registry in self.registries:
                registry.tick()
            self.settle()
        raise AssertionError("no leader")


def test_a_group_elects_a_leader_and_replicates_over_the_routes() -> None:
    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        leader = hosts.leader()
        assert all(g.core.lead == leader.core.id for g in hosts.groups)
        done: list[bool] = []
        leader.propose(b"stream create", lambda ok, _i: done.append(ok))
        hosts.settle()
        assert done == [True]
        assert all(m.data == [b"stream create"] for m in hosts.machines)
        assert all(t.sent > 0 and t.received > 0 for t in hosts.transports)
        assert sum(r.dropped_unknown + r.dropped_corrupt for r in hosts.registries) == 0

    asyncio.run(scenario())


def test_raft_messages_are_on_the_route_sockets_before_the_fsync_that_follows_them() -> None:
    """The leader's appends are written to the routes before its own fsync blocks the loop (its
    followers fsync alongside it, Raft thesis §10.2.1), and a follower's answer before anything
    after its fsync: neither waits for the server's flush on the loop's next turn."""
    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        leader = hosts.leader()
        hosts.settle()
        index = hosts.groups.index(leader)
        followers = [i for i in range(len(hosts.groups)) if i != index]

        def on_wire(host: int, to: int) -> bool:
            """RAFT bytes for host `to` written to host `host`'s route sockets (not just queued)."""
            prefix = b"$ARAFT.%s." % hosts.peers[to].encode()
            return any(prefix in peer.conn.transport.out for peer in hosts.mesh.managers[host].peers.values())

        seen: list[bool] = []
        storage = leader.storage
        assert isinstance(storage, SpyStorage)
        storage.on_sync = lambda: seen.append(all(on_wire(index, f) for f in followers))
        done: list[bool] = []
        leader.propose(b"x", lambda ok, _i: done.append(ok))
        hosts.loop.turn()  # the leader's Ready: appends out, then its fsync
        assert seen == [True]
        for transport, conn in hosts.mesh.pipes:  # carry the bytes without any server flush
            if transport.out:
                data = bytes(transport.out)
                transport.out.clear()
                conn.data_received(data)
        hosts.loop.turn()  # the followers' Readies: fsync, then the answer goes out at once
        assert all(on_wire(f, index) for f in followers)
        hosts.settle()
        assert done == [True]

    asyncio.run(scenario())


def test_the_subscription_is_advertised_to_the_routes_in_the_system_account() -> None:
    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        # host 1 counts its own RAFT subscription among the interest it advertises
        assert ("$SYS", b"$ARAFT.%s.>" % hosts.peers[1].encode()) in hosts.mesh.managers[1].plain_refs
        # every host learnt every other host's RAFT interest from its routes
        for i, server in enumerate(hosts.mesh.servers):
            for j, peer in enumerate(hosts.peers):
                plain, _ = server.accounts.get("$SYS").sublist.match(b"$ARAFT.%s.g.x" % peer.encode())
                assert len(plain) == 1, (i, j)
                assert (plain[0].conn.is_route if i != j else not plain[0].conn.is_link)

    asyncio.run(scenario())


def test_unreachable_and_congested_peers_are_dropped_and_counted_never_queued() -> None:
    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        transport = hosts.transports[0]
        transport.send(peer_token("nobody"), GROUP, b"x")
        assert transport.dropped_unreachable == 1 and transport.sent == 0
        route = next(p for p in hosts.mesh.managers[0].peers.values() if p.conn.remote_name == "h1")
        route.conn.paused_writing = True
        transport.send(hosts.peers[1], GROUP, b"x")
        assert transport.dropped_congested == 1 and transport.sent == 0
        route.conn.paused_writing = False
        transport.send(hosts.peers[1], GROUP, b"not a raft message")
        hosts.settle()
        assert transport.sent == 1
        assert hosts.registries[1].dropped_corrupt == 1  # garbage reached the registry, not the group
        with pytest.raises(ValueError):
            transport.send("a.b", GROUP, b"x")

    asyncio.run(scenario())


def test_subjects_are_built_once_per_peer_and_group_within_a_bounded_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """send() keeps each (peer, group) subject it checked; past RAFT_SUBJECTS_CACHED_MAX the cache
    starts over and sends still reach the right subject; a bad id is refused every time."""
    monkeypatch.setattr("appliance.limits.RAFT_SUBJECTS_CACHED_MAX", 2)

    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        transport = hosts.transports[0]
        for group in ("g1", "g2", "g3", GROUP):
            transport.send(hosts.peers[1], group, b"x")
            assert len(transport._subjects) <= 2
        assert transport._subjects[(hosts.peers[1], GROUP)] == b"$ARAFT.%s.%s.%s" % (
            hosts.peers[1].encode(), GROUP.encode(), hosts.peers[0].encode())
        hosts.settle()
        assert transport.sent == 4
        assert hosts.registries[1].dropped_unknown == 3 and hosts.registries[1].dropped_corrupt == 1  # g1-g3 unknown there
        for _ in range(2):
            with pytest.raises(ValueError):
                transport.send(hosts.peers[1], "a.b", b"x")
        assert ("a.b" not in {group for _, group in transport._subjects})

    asyncio.run(scenario())


def test_a_leader_cut_off_from_the_others_is_replaced() -> None:
    async def scenario() -> None:
        hosts = Hosts()
        await hosts.mesh.start()
        hosts.settle()
        old = hosts.leader()
        index = hosts.groups.index(old)
        server_id = hosts.mesh.servers[index].server_id
        # close every route of the leader's host: its traffic has nowhere to go
        for manager in hosts.mesh.managers:
            for peer in list(manager.peers.values()):
                if manager.server.server_id == server_id or peer.conn.remote_id == server_id:
                    peer.conn.close("test")
        hosts.settle()
        others = [g for g in hosts.groups if g is not old]
        for _ in range(300):
            if any(g.is_leader() and g.core.term > old.core.term for g in others):
                break
            hosts.clock.advance(0.1)
            for registry in hosts.registries:
                registry.tick()
            hosts.settle()
        new = [g for g in others if g.is_leader()]
        assert len(new) == 1
        assert hosts.transports[index].dropped_unreachable > 0

    asyncio.run(scenario())


def test_raft_hosts_tick_from_the_real_clock_and_elect_over_the_routes() -> None:
    """RaftHost on each server: groups scheduled on the asyncio loop, ticks from the wall clock."""
    async def scenario() -> None:
        mesh = RouteMesh()
        await mesh.start()
        loop = asyncio.get_running_loop()
        hosts = [RaftHost(server, loop) for server in mesh.servers]
        voters = tuple(sorted(h.peer for h in hosts))
        groups = []
        for host in hosts:
            group = RaftGroup(group_id=GROUP, config=RaftConfig(id=host.peer), storage=MemoryStorage(ConfState(voters)),
                              transport=host.registry.outbox(GROUP), state_machine=Machine(), clock=SystemClock(),
                              rng=random.Random(host.peer), scheduler=loop)
            host.registry.add(group)
            groups.append(group)
        deadline = loop.time() + 15
        while loop.time() < deadline:
            mesh.pump()
            leaders = [g for g in groups if g.is_leader()]
            if len(leaders) == 1 and all(g.core.lead == leaders[0].core.id for g in groups):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("no leader over the routes")
        for host in hosts:
            host.close()
        assert len(hosts[0].registry) == 0

    asyncio.run(scenario())


class HostedGroups:
    """A RaftHost per server (as a worker runs them), its groups on a hand-cranked loop and clock."""

    def __init__(self, mesh: RouteMesh, loop: asyncio.AbstractEventLoop) -> None:
        self.mesh = mesh
        self.hand, self.clock = Loop(), ManualClock()
        self.hosts = [RaftHost(server, loop) for server in mesh.servers]
        voters = tuple(sorted(h.peer for h in self.hosts))
        self.groups: list[RaftGroup] = []
        for host in self.hosts:
            group = RaftGroup(group_id=GROUP, config=RaftConfig(id=host.peer),
                              storage=MemoryStorage(ConfState(voters)), transport=host.registry.outbox(GROUP),
                              state_machine=Machine(), clock=self.clock, rng=random.Random(host.peer),
                              scheduler=self.hand)
            host.registry.add(group)
            self.groups.append(group)

    def settle(self) -> None:
        for _ in range(200):
            self.hand.settle()
            before = sum(h.transport.received for h in self.hosts)
            self.mesh.pump()
            if not self.hand.soon and sum(h.transport.received for h in self.hosts) == before:
                return
        raise AssertionError("did not settle")

    def tick(self, live: list[RaftHost]) -> None:
        self.clock.advance(0.1)
        for host in live:
            host.registry.tick()
        self.settle()

    def close(self) -> None:
        for host in self.hosts:
            host.close()


def test_a_closed_route_to_the_leaders_host_elects_a_new_leader_within_a_few_ticks() -> None:
    """A kill -9 closes the leader host's routes at once: the others campaign in their slots
    (RaftCore.peer_gone) instead of waiting out the leader's lease and an election timeout."""
    async def scenario() -> None:
        mesh = RouteMesh()
        await mesh.start()
        hosted = HostedGroups(mesh, asyncio.get_running_loop())
        hosted.settle()
        for _ in range(300):
            if sum(g.is_leader() for g in hosted.groups) == 1 and all(g.core.lead for g in hosted.groups):
                break
            hosted.tick(hosted.hosts)
        old = next(g for g in hosted.groups if g.is_leader())
        dead = hosted.groups.index(old)
        dead_id = mesh.servers[dead].server_id
        for manager in mesh.managers:
            for peer in list(manager.peers.values()):
                if manager.server.server_id != dead_id and peer.conn.remote_id == dead_id:
                    peer.conn.close("Client Closed")  # what the survivors see of a killed process
        others = [g for i, g in enumerate(hosted.groups) if i != dead]
        assert all(g.core.lead == "" for g in others)  # the dead leader's lease no longer holds
        live = [h for i, h in enumerate(hosted.hosts) if i != dead]
        ticks = 0
        while not any(g.is_leader() for g in others) and ticks < 30:
            hosted.tick(live)
            ticks += 1
        assert ticks <= 1 + old.core.config.leader_gone_slot_ticks < old.core.config.election_ticks
        new = next(g for g in others if g.is_leader())
        assert new.core.term == old.core.term + 1
        assert all(g.core.lead == new.core.id for g in others)
        hosted.close()

    asyncio.run(scenario())
