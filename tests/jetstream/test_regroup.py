"""Membership changes of a stream's group (regroup.py, meta.py), pure: the new group record, the
one change a leader proposes next, consumers following their stream, replica-count changes,
re-placement of under-replicated streams and of evicted servers, and the snapshot keeping them."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, strategies as st

from appliance.clock import ManualClock
from appliance.cluster.placement import ServerInfo
from appliance.jetstream.meta import MetaGroup, MetaState
from appliance.jetstream.regroup import (
    exclusions,
    next_change,
    peers_of,
    regrouped,
    resized,
    restarted_since_excluded,
    under_replicated,
)


class Loop:
    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> object:
        raise AssertionError("no timers expected")

    def settle(self) -> None:
        while self.soon:
            soon, self.soon = self.soon, []
            for fn in soon:
                fn()


def five() -> list[ServerInfo]:
    return [ServerInfo(f"n{i}", f"p{i}", "C1") for i in range(1, 6)]


def meta(loop: Loop, servers: list[ServerInfo]) -> MetaGroup:
    group = MetaGroup(root=None, peer="p1", clock=ManualClock(), rng=random.Random(1), scheduler=loop,
                      server_name="n1", cluster="C1")
    group.servers = servers
    return group


def put(meta_group: MetaGroup, loop: Loop, op: dict[str, object]) -> None:
    done: list[bool] = []
    meta_group.propose(op, done.append)
    loop.settle()
    assert done == [True]


def stream_put(replicas: int) -> dict[str, object]:
    return {"op": "stream_put", "acc": "A", "config": {"name": "S", "num_replicas": replicas}, "created": 7}


def test_regrouped_marks_new_peers_as_joining_and_keeps_the_preferred_leader() -> None:
    group = {"name": "S-1", "peers": ["p1", "p2", "p3"], "preferred": "p2"}
    moved = regrouped(group, ["p1", "p2", "p4"])
    assert moved == {"name": "S-1", "peers": ["p1", "p2", "p4"], "preferred": "p2", "joining": ["p4"],
                     "raft": True}
    again = regrouped(moved, ["p2", "p4"])
    assert again["joining"] == ["p4"] and again["preferred"] == "p2"  # still joining until it restarts
    assert regrouped(again, ["p4"])["preferred"] == "p4"
    single = regrouped({"name": "S-1", "peers": ["p1"], "preferred": "p1"}, ["p1"])
    assert "raft" not in single and "joining" not in single


def test_a_leader_adds_learners_first_and_removes_itself_last() -> None:
    assert next_change(["p1", "p2", "p3"], ["p1", "p2", "p4"], "p1") == ("add_learner", "p4")
    # p4 is catching up: nothing is removed until its group promoted it
    assert next_change(["p1", "p2", "p3"], ["p1", "p2", "p4"], "p1", ["p4"]) is None
    assert next_change(["p1", "p2", "p3", "p4"], ["p2", "p3", "p4"], "p1") == ("remove", "p1")
    assert next_change(["p1", "p2", "p3", "p4"], ["p1", "p4"], "p1") == ("remove", "p2")
    assert next_change(["p1", "p2"], ["p2", "p1"], "p1") is None
    # R1 -> R3: both joiners are added as learners, one after the other
    assert next_change(["p1"], ["p1", "p2", "p3"], "p1", ["p2"]) == ("add_learner", "p3")
    # a learner no longer wanted (R3 -> R1 while catching up) goes before any voter
    assert next_change(["p1", "p2"], ["p1"], "p1", ["p3"]) == ("remove", "p3")


@given(st.sets(st.sampled_from("abcdefg"), min_size=1), st.sets(st.sampled_from("abcdefg"), min_size=1),
       st.sampled_from("abcdefg"))
def test_one_change_at_a_time_reaches_the_wanted_voters(voters: set[str], wanted: set[str], own: str) -> None:
    """Learners never count: every change keeps at least the voters the group started with
    until every wanted peer votes (the group promotes a learner when next_change waits)."""
    current, learners, target = sorted(voters), [], sorted(wanted)
    for _ in range(3 * (len(voters) + len(wanted)) + 1):
        change = next_change(current, target, own, learners)
        if change is None:
            if not learners:
                break
            promoted = learners.pop(0)  # its group promotes it once caught up
            current = sorted([*current, promoted])
            continue
        op, peer = change
        if op == "add_learner":
            assert peer not in current and peer not in learners
            learners.append(peer)
            continue
        assert op == "remove"
        if peer in learners:
            learners.remove(peer)
            continue
        assert not [p for p in target if p not in current]  # voters leave only after every wanted one votes
        current = [p for p in current if p != peer]
        assert current
        if peer == own:
            assert not [p for p in current if p not in target]  # the leader leaves last
    assert sorted(current) == target and not learners


def test_shrinking_keeps_the_proposer() -> None:
    assert resized(["p1", "p2", "p3"], 1, "p3") == ["p3"]
    assert resized(["p1", "p2", "p3"], 2, "p9") == ["p1", "p2"]


def test_a_replica_count_change_places_new_peers_and_consumers_follow() -> None:
    loop = Loop()
    group = meta(loop, five())
    put(group, loop, stream_put(1))
    put(group, loop, {"op": "consumer_put", "acc": "A", "stream": "S", "config": {"name": "D"}, "created": 9})
    assert peers_of(group.state.group_of("A", "S")) == ["p1"]
    put(group, loop, stream_put(3))
    grown = group.state.group_of("A", "S")
    assert isinstance(grown, dict) and grown["peers"][0] == "p1" and len(grown["peers"]) == 3
    assert grown["joining"] == grown["peers"][1:] and grown["raft"] is True
    assert peers_of(group.state.group_of("A", "S", "D")) == grown["peers"]
    put(group, loop, stream_put(3))  # an update that keeps the count keeps the group
    assert group.state.group_of("A", "S") == grown
    put(group, loop, stream_put(1))
    shrunk = group.state.group_of("A", "S")
    assert isinstance(shrunk, dict) and shrunk["peers"] == ["p1"] and shrunk["raft"] is True
    assert peers_of(group.state.group_of("A", "S", "D")) == ["p1"]


def test_an_under_replicated_stream_is_re_placed_but_not_on_the_peer_removed_from_it() -> None:
    loop = Loop()
    servers = five()[:3]
    group = meta(loop, servers)
    put(group, loop, stream_put(3))
    recorded = group.state.group_of("A", "S")
    assert isinstance(recorded, dict)
    changed = regrouped(recorded, ["p1", "p2"])
    changed["excluded"] = ["p3"]
    put(group, loop, {"op": "stream_peers", "acc": "A", "stream": "S", "group": changed})
    assert under_replicated(group.state.accounts["A"]["S"]) == 1
    assert group.replacement_op() is None  # p3 was removed from it and has not restarted
    assert group.replacement_op(frozenset({("A", "OTHER", "p3")})) is None  # restarted after another's
    op = group.replacement_op(frozenset({("A", "S", "p3")}))
    assert op is not None and peers_of(op["group"]) == ["p1", "p2", "p3"] and "excluded" not in op["group"]
    group.servers = five()
    op = group.replacement_op()
    assert op is not None and peers_of(op["group"]) == ["p1", "p2", "p4"]  # a new server takes it
    put(group, loop, op)
    assert under_replicated(group.state.accounts["A"]["S"]) == 0
    assert group.replacement_op() is None


def test_a_peer_removes_exclusion_ends_only_with_a_restart_after_it() -> None:
    """The cluster driver's bookkeeping: before, a server that had restarted once at any time was
    placed back on a stream a second after a PEER.REMOVE took it off (the chaos suite saw the
    removed server re-join at once on three nodes)."""
    accounts = {"A": {"S": {"group": {"peers": ["p1", "p2"], "excluded": ["p3"]}},
                      "T": {"group": {"peers": ["p1", "p2", "p3"]}}}}
    assert exclusions(accounts) == {("A", "S", "p3")}
    excluded = exclusions(accounts)
    restarted: set[tuple[str, str, str]] = set()
    restarted = restarted_since_excluded(restarted, set(), {"p3"})  # a restart before any peer-remove
    assert restarted == set()
    restarted = restarted_since_excluded(restarted, excluded, set())  # the peer-remove: excluded
    assert restarted == set()
    restarted = restarted_since_excluded(restarted, excluded, {"p2"})  # another server's restart
    assert restarted == set()
    restarted = restarted_since_excluded(restarted, excluded, {"p3"})  # p3 restarts after it
    assert restarted == {("A", "S", "p3")}
    restarted = restarted_since_excluded(restarted, excluded, set())  # remembered while excluded
    assert restarted == {("A", "S", "p3")}
    restarted = restarted_since_excluded(restarted, set(), set())  # placed again: the exclusion ended
    assert restarted == set()
    restarted = restarted_since_excluded(restarted, excluded, set())  # removed again: needs a new restart
    assert restarted == set()


def test_an_evicted_server_is_replaced_everywhere_and_never_placed_again() -> None:
    loop = Loop()
    group = meta(loop, five())
    put(group, loop, stream_put(3))
    peers = peers_of(group.state.group_of("A", "S"))
    evicted = peers[1]
    put(group, loop, {"op": "server_remove", "peer": evicted, "ts": 1_700_000_000.5})
    assert group.state.removed == {evicted: 1_700_000_000.5}
    op = group.replacement_op()
    assert op is not None
    new = peers_of(op["group"])
    assert evicted not in new and len(new) == 3 and new[:1] == peers[:1]
    twin = MetaState()
    twin.restore(group.state.snapshot())
    assert twin.removed == {evicted: 1_700_000_000.5} and twin.accounts == group.state.accounts
    old = MetaState()
    old.restore(b'{"A":{}}')  # a snapshot of before: accounts only
    assert old.accounts == {"A": {}} and old.removed == {}
    older = MetaState()  # a snapshot of before removal times: the time is not known
    older.restore(b'{"v":2,"accounts":{"A":{}},"removed":["x"]}')
    assert older.removed == {"x": 0.0}


def test_a_re_added_server_can_hold_replicas_again() -> None:
    loop = Loop()
    group = meta(loop, five())
    put(group, loop, stream_put(3))
    evicted = peers_of(group.state.group_of("A", "S"))[1]
    put(group, loop, {"op": "server_remove", "peer": evicted, "ts": 10.0})
    op = group.replacement_op()
    assert op is not None
    put(group, loop, op)
    put(group, loop, {"op": "server_readd", "peer": evicted})
    assert group.state.removed == {}
    twin = MetaState()
    twin.restore(group.state.snapshot())
    assert twin.removed == {}
    five_replicas = {"op": "stream_put", "acc": "A", "config": {"name": "T", "num_replicas": 5}, "created": 8}
    put(group, loop, five_replicas)  # five servers, five replicas: the re-added one is among them
    assert evicted in peers_of(group.state.group_of("A", "T"))
