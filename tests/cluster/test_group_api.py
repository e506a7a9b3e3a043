"""RaftGroup as the layers above use it: a scheduled Ready loop (no commit inside `propose`),
durability decided by the driver (lazy entries only on a single voter), membership change and
leader transfer through the group's own API, and the registry + transport seam."""

import random
from collections.abc import Callable, Sequence

import pytest

from appliance.clock import ManualClock
from appliance.cluster.group import RaftGroup
from appliance.cluster.registry import GroupRegistry
from appliance.errors import LimitExceeded
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, Entry, HardState, Message, MessageType, RaftConfig


class Loop:
    """A hand-cranked event loop: call_soon runs on the next `turn`, timers when `fire` is called."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> "Loop._Timer":
        self.timers.append((delay_s, fn))
        return Loop._Timer(self, (delay_s, fn))

    class _Timer:
        def __init__(self, loop: "Loop", item: tuple[float, Callable[[], None]]) -> None:
            self.loop, self.item = loop, item

        def cancel(self) -> None:
            if self.item in self.loop.timers:
                self.loop.timers.remove(self.item)

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for fn in soon:
            fn()

    def settle(self) -> None:
        for _ in range(100):
            if not self.soon:
                return
            self.turn()
        raise AssertionError("the loop never went idle")

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for _, fn in timers:
            fn()


class CountingStorage(MemoryStorage):
    def __init__(self, voters: tuple[str, ...]) -> None:
        super().__init__(ConfState(voters))
        self.saves: list[bool] = []  # the sync flag of every save with entries
        self.syncs = 0

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        if entries:
            self.saves.append(sync)
        super().save(hard_state, entries, sync=sync)

    def sync(self) -> None:
        self.syncs += 1


class Machine:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def apply(self, entries: Sequence[Entry]) -> None:
        self.data.extend(e.data for e in entries if e.data)

    def applied_index(self) -> int:
        return 0

    def snapshot(self) -> bytes:
        return b"\n".join(self.data)

    def restore(self, data: bytes) -> None:
        self.data = data.split(b"\n") if data else []


class NoSend:
    def send(self, messages: Sequence[Message]) -> None:
        assert not messages


def single(loop: Loop) -> tuple[RaftGroup, CountingStorage, Machine]:
    storage, machine = CountingStorage(("a",)), Machine()
    group = RaftGroup(group_id="g", config=RaftConfig(id="a"), storage=storage, transport=NoSend(),
                      state_machine=machine, clock=ManualClock(), rng=random.Random(1), scheduler=loop)
    group.campaign()
    loop.settle()
    assert group.is_leader()
    return group, storage, machine


def test_a_proposal_commits_from_the_scheduled_ready_loop_never_inside_propose() -> None:
    loop = Loop()
    group, _, machine = single(loop)
    done: list[tuple[bool, int]] = []
    group.propose(b"x", lambda ok, index: done.append((ok, index)))
    assert done == [] and machine.data == []  # nothing inside the call
    group.propose(b"y", lambda ok, index: done.append((ok, index)))
    loop.turn()  # one Ready for both: group commit
    assert machine.data == [b"x", b"y"]
    assert [ok for ok, _ in done] == [True, True]


def test_run_now_runs_the_ready_loop_in_the_callers_turn_and_never_re_enters_it() -> None:
    loop = Loop()
    group, storage, machine = single(loop)
    storage.saves.clear()
    done: list[bool] = []
    group.propose(b"x", lambda ok, _index: done.append(ok))
    group.run_now()  # a caller that batched its proposals itself: no loop turn in between
    assert machine.data == [b"x"] and done == [True]
    loop.settle()  # the turn propose scheduled finds nothing left to do
    assert machine.data == [b"x"] and storage.saves == [True]

    nested: list[int] = []  # run_now from inside the Ready loop (an apply) only schedules
    apply = machine.apply

    def apply_and_run(entries: Sequence[Entry]) -> None:
        apply(entries)
        if entries[-1].data == b"y":
            group.propose(b"z")
            group.run_now()
            nested.append(len(machine.data))

    machine.apply = apply_and_run  # type: ignore[method-assign]
    group.propose(b"y")
    group.run_now()
    # z was not applied inside y's apply (no re-entry), but by the same outer loop right after
    assert nested == [2] and machine.data == [b"x", b"y", b"z"]


def test_a_single_voter_writes_lazy_entries_without_an_fsync_and_syncs_them_by_timer() -> None:
    loop = Loop()
    group, storage, _ = single(loop)
    storage.saves.clear()
    group.propose(b"delivered", durable=False)
    loop.settle()
    assert storage.saves == [False] and storage.syncs == 0
    assert len(loop.timers) == 1
    loop.fire()
    assert storage.syncs == 1
    group.propose(b"acked")  # durable (the default): fsynced before it is applied
    loop.settle()
    assert storage.saves == [False, True]


def test_a_lazy_entry_is_fsynced_with_a_durable_one_of_the_same_ready() -> None:
    loop = Loop()
    group, storage, _ = single(loop)
    storage.saves.clear()
    group.propose(b"delivered", durable=False)
    group.propose(b"acked")
    loop.settle()
    assert storage.saves == [True]


def test_close_commits_what_a_single_voter_holds_syncs_lazy_writes_and_fails_the_rest() -> None:
    loop = Loop()
    group, storage, machine = single(loop)
    done: list[bool] = []
    group.propose(b"late", lambda ok, _i: done.append(ok), durable=False)
    group.close()
    assert machine.data == [b"late"] and done == [True]
    assert storage.syncs == 1  # the lazy write reached the disk before close returned
    loop.settle()  # the scheduled turn finds the group closed and does nothing
    assert machine.data == [b"late"]


# --- three voters over registries and an in-memory transport ---------------------------------------


class Net:
    """An in-memory RaftTransport for several registries; `cut` drops a peer's traffic."""

    def __init__(self) -> None:
        self.registries: dict[str, GroupRegistry] = {}
        self.queue: list[tuple[str, str, str, bytes]] = []
        self.cut: set[str] = set()

    def endpoint(self, peer: str) -> "Net._Endpoint":
        return Net._Endpoint(self, peer)

    class _Endpoint:
        def __init__(self, net: "Net", peer: str) -> None:
            self.net, self.peer = net, peer

        def send(self, peer: str, group_id: str, message: bytes) -> None:
            self.net.queue.append((self.peer, peer, group_id, message))

        def flush(self) -> None:
            pass  # the queue is delivered when the test calls Net.flush

    def flush(self) -> bool:
        queue, self.queue = self.queue, []
        for sender, peer, group_id, message in queue:
            if sender not in self.cut and peer not in self.cut:
                self.registries[peer].deliver(group_id, sender, message)
        return bool(queue)


class Cluster:
    def __init__(self, peers: tuple[str, ...] = ("a", "b", "c")) -> None:
        self.loop, self.net, self.clock = Loop(), Net(), ManualClock()
        self.groups: dict[str, RaftGroup] = {}
        self.machines: dict[str, Machine] = {}
        for peer in peers:
            registry = GroupRegistry(self.net.endpoint(peer))
            self.net.registries[peer] = registry
            self.add(peer, ConfState(peers))

    def add(self, peer: str, conf: ConfState) -> RaftGroup:
        registry = self.net.registries.setdefault(peer, GroupRegistry(self.net.endpoint(peer)))
        machine = Machine()
        group = RaftGroup(group_id="S-1", config=RaftConfig(id=peer), storage=MemoryStorage(conf),
                          transport=registry.outbox("S-1"), state_machine=machine, clock=self.clock,
                          rng=random.Random(peer), scheduler=self.loop)
        registry.add(group)
        self.groups[peer], self.machines[peer] = group, machine
        return group

    def settle(self) -> None:
        for _ in range(500):
            self.loop.settle()
            if not self.net.flush() and not self.loop.soon:
                if not self.loop.timers:
                    return
                self.loop.fire()  # time passes: a leader's held commit notices go out
        raise AssertionError("did not settle")

    def leader(self) -> RaftGroup:
        for _ in range(100):
            leaders = [g for p, g in self.groups.items() if g.is_leader() and p not in self.net.cut]
            if len(leaders) == 1:
                return leaders[0]
            self.clock.advance(0.1)
            for registry in self.net.registries.values():
                registry.tick()
            self.settle()
        raise AssertionError("no leader")


def test_a_three_voter_group_commits_only_once_a_quorum_has_it_and_answers_from_the_callback() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    done: list[bool] = []
    leader.propose(b"m1", lambda ok, _i: done.append(ok))
    cluster.loop.settle()
    assert done == []  # persisted here, but no follower has answered yet
    cluster.settle()
    assert done == [True]
    assert all(m.data == [b"m1"] for m in cluster.machines.values())


def test_a_leader_holds_a_commit_notice_for_the_next_append_or_until_its_timer() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    followers = [p for p in cluster.groups if p != leader.core.id]

    def from_leader() -> list[Message]:
        return [decode_message(m) for sender, _, _, m in cluster.net.queue if sender == leader.core.id]

    def round_trip() -> None:  # appends out, answers back, the leader commits and applies
        for _ in range(2):
            cluster.loop.settle()
            cluster.net.flush()
        cluster.loop.settle()

    done: list[bool] = []
    leader.propose(b"m1", lambda ok, _i: done.append(ok))
    round_trip()
    assert done == [True]
    assert from_leader() == []  # the commit notice is held, not sent
    assert all(cluster.machines[p].data == [] for p in followers)
    leader.propose(b"m2", lambda ok, _i: done.append(ok))
    cluster.loop.settle()
    appends = from_leader()
    assert sorted(m.to for m in appends) == sorted(followers)
    assert all(m.entries and m.commit == leader.core.log.committed for m in appends)  # carries m1's commit
    round_trip()
    assert done == [True, True]
    assert all(cluster.machines[p].data == [b"m1"] for p in followers)  # learnt from m2's append
    assert from_leader() == []
    cluster.loop.fire()  # no append came within commit_notice_s: the held notices go out
    notices = from_leader()
    assert sorted(m.to for m in notices) == sorted(followers)
    assert all(not m.entries and m.commit == leader.core.log.committed for m in notices)
    cluster.net.flush()
    cluster.loop.settle()
    assert all(cluster.machines[p].data == [b"m1", b"m2"] for p in followers)


def test_a_commit_notice_for_a_follower_whose_answer_is_still_on_its_way_is_held_too() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    cluster.settle()
    slow, fast = [p for p in cluster.groups if p != leader.core.id]
    done: list[bool] = []
    leader.propose(b"m1", lambda ok, _i: done.append(ok))
    cluster.loop.settle()
    cluster.net.flush()  # the appends reach both followers
    cluster.loop.settle()  # both persist and answer
    late = [item for item in cluster.net.queue if item[0] == slow]
    cluster.net.queue = [item for item in cluster.net.queue if item[0] != slow]
    cluster.net.flush()
    cluster.loop.settle()  # the leader commits with the fast follower
    assert done == [True]
    assert [item for item in cluster.net.queue if item[0] == leader.core.id] == []  # both notices held
    cluster.net.queue.extend(late)
    cluster.settle()  # the timer sends what no append carried
    assert all(cluster.machines[p].data == [b"m1"] for p in (slow, fast))


def test_leader_transfer_membership_change_through_the_group_api() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    target = next(p for p in cluster.groups if p != leader.core.id)
    assert leader.transfer_leader(target) == target
    cluster.settle()
    new = cluster.groups[target]
    assert new.is_leader() and not leader.is_leader()
    removed: list[bool] = []
    gone = leader.core.id
    new.remove_voter(gone, lambda ok, _i: removed.append(ok))
    cluster.settle()
    assert removed == [True] and gone not in new.voters()
    cluster.net.registries[gone].remove("S-1")
    added: list[bool] = []
    new.add_voter("d", lambda ok, _i: added.append(ok))
    cluster.add("d", ConfState(()))
    cluster.settle()
    new.propose(b"after")
    for _ in range(20):  # the new voter catches up over heartbeats
        cluster.clock.advance(0.1)
        for registry in cluster.net.registries.values():
            registry.tick()
        cluster.settle()
    others = {p for p in "abc" if p not in (gone, target)}
    assert added == [True] and set(new.voters()) == {target, "d", *others}
    assert cluster.machines["d"].data == cluster.machines[target].data


def test_a_lost_leadership_fails_the_waiting_proposal() -> None:
    cluster = Cluster()
    leader = cluster.leader()
    done: list[bool] = []
    cluster.net.cut.add(leader.core.id)
    leader.propose(b"lost", lambda ok, _i: done.append(ok))
    cluster.settle()
    assert done == []
    cluster.leader()  # the other two elect a new leader
    new = next(g for p, g in cluster.groups.items() if g.is_leader() and p != leader.core.id)
    new.propose(b"won")
    cluster.settle()
    cluster.net.cut.clear()
    for _ in range(30):
        cluster.clock.advance(0.1)
        for registry in cluster.net.registries.values():
            registry.tick()
        cluster.settle()
    assert done == [False]
    assert cluster.machines[leader.core.id].data == [b"won"]


def test_the_registry_drops_strangers_and_garbage() -> None:
    net = Net()
    registry = GroupRegistry(net.endpoint("a"))
    group = RaftGroup(group_id="g", config=RaftConfig(id="a"), storage=MemoryStorage(ConfState(("a", "b"))),
                      transport=registry.outbox("g"), state_machine=Machine(), clock=ManualClock(),
                      rng=random.Random(1))
    registry.add(group)
    heartbeat = encode_message(Message(MessageType.HEARTBEAT, "b", "a", term=1))
    assert not registry.deliver("other", "b", heartbeat)
    assert not registry.deliver("g", "b", b"\x01garbage")
    assert not registry.deliver("g", "c", heartbeat)  # the envelope's sender must be the message's
    assert (registry.dropped_unknown, registry.dropped_corrupt) == (1, 2)
    assert registry.deliver("g", "b", heartbeat)
    assert group.leader() == "b"
    with pytest.raises(ValueError):
        registry.add(group)


def test_the_registry_has_a_limit() -> None:
    registry = GroupRegistry(Net().endpoint("a"), groups_max=1)
    for name in ("g1", "g2"):
        group = RaftGroup(group_id=name, config=RaftConfig(id="a"), storage=MemoryStorage(ConfState(("a",))),
                          transport=registry.outbox(name), state_machine=Machine(), clock=ManualClock(),
                          rng=random.Random(1))
        if name == "g1":
            registry.add(group)
        else:
            with pytest.raises(LimitExceeded):
                registry.add(group)


# --- a state machine that is its own durable copy (an R1 stream's store) ---------------------------


class Syncer:
    """An AppliedSync whose syncs complete only when the test says so."""

    def __init__(self) -> None:
        self.calls: list[Callable[[bool], None]] = []

    def sync_applied(self, *, urgent: bool, done: Callable[[bool], None]) -> None:
        self.calls.append(done)


def single_with_syncer(loop: Loop) -> tuple[RaftGroup, Machine, Syncer]:
    syncer, machine = Syncer(), Machine()
    group = RaftGroup(group_id="s", config=RaftConfig(id="a"), storage=CountingStorage(("a",)),
                      transport=NoSend(), state_machine=machine, clock=ManualClock(), rng=random.Random(1), scheduler=loop,
                      applied_sync=syncer)
    group.campaign()
    loop.settle()
    return group, machine, syncer


def test_a_single_voter_acknowledges_applied_entries_only_after_its_state_is_synced() -> None:
    loop = Loop()
    group, machine, syncer = single_with_syncer(loop)
    done: list[tuple[str, bool]] = []
    group.propose(b"1", lambda ok, _i: done.append(("1", ok)))
    loop.settle()
    assert machine.data == [b"1"] and done == []  # applied, not durable: not acknowledged
    assert len(syncer.calls) == 1
    group.propose(b"2", lambda ok, _i: done.append(("2", ok)))
    group.propose(b"3", lambda ok, _i: done.append(("3", ok)))
    loop.settle()
    assert len(syncer.calls) == 1  # one sync at a time: 2 and 3 wait for the next one
    syncer.calls[0](True)
    assert done == [("1", True)] and len(syncer.calls) == 2
    syncer.calls[1](False)  # a failed fsync: nothing it covered is acknowledged
    assert done == [("1", True), ("2", False), ("3", False)]


def test_a_replicated_group_does_not_wait_for_the_state_machine_sync() -> None:
    cluster = Cluster()
    syncer = Syncer()
    for group in cluster.groups.values():
        group.applied_sync = syncer
    leader = cluster.leader()
    done: list[bool] = []
    leader.propose(b"m", lambda ok, _i: done.append(ok))
    cluster.settle()
    assert done == [True] and syncer.calls == []  # its log is what a quorum made durable
