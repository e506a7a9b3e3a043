"""Learners in the pure RaftCore (no sockets, no clock): a member that is replicated to but
counts for no quorum, never campaigns, and is promoted to voter by the leader once caught up."""

import random

import pytest

from appliance.errors import CorruptData, ProposalDropped
from appliance.raft import quorum
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.confchange import apply_to, decode_conf_change, encode_conf_change
from appliance.raft.core import RaftCore
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import (
    ConfChange,
    ConfChangeOp,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    RaftConfig,
    Role,
    Snapshot,
    SnapshotMeta,
)
from tests.raft.test_core import Cluster


def with_learner(cluster: Cluster, peer: str = "4") -> RaftCore:
    """The elected leader of `cluster` adds `peer` (an empty new server) as a learner."""
    leader = next(core for core in cluster.cores.values() if core.role == Role.LEADER)
    cluster.stores[peer] = MemoryStorage(ConfState())
    cluster.cores[peer] = RaftCore(RaftConfig(id=peer), cluster.stores[peer], random.Random(7))
    leader.propose_conf_change(ConfChange(ConfChangeOp.ADD_LEARNER, peer))
    cluster.stabilize()
    return cluster.cores[peer]


def test_a_learner_receives_the_log_and_learns_the_membership_but_is_no_voter() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose(b"before")
    learner = with_learner(cluster)
    leader.propose(b"after")
    cluster.stabilize()
    for core in cluster.cores.values():
        assert core.voters == ("1", "2", "3") and core.learners == ("4",)
    assert learner.log.applied == leader.log.applied == leader.log.last_index()
    assert leader.conf_state() == ConfState(("1", "2", "3"), ("4",))
    assert [p.peer for p in leader.status().peers] == ["2", "3", "4"]


def test_the_commit_index_counts_voters_only() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    with_learner(cluster)
    committed = leader.log.committed
    cluster.cut = {"2", "3"}  # the leader and the learner alone: not a quorum
    index = leader.propose(b"x")
    cluster.stabilize()
    assert leader.progress["4"].match == index  # the learner holds it...
    assert leader.log.committed == committed  # ...and that does not commit it
    cluster.cut = set()
    leader.propose(b"y")  # the next append carries x to the voters again
    cluster.stabilize()
    assert leader.log.committed >= index


def test_a_single_voter_commits_alone_while_its_learners_are_unreachable() -> None:
    """R1 -> R3: the joiners fetch the snapshot as learners; the stream's voter keeps committing."""
    cluster = Cluster(voters=("1",))
    leader = cluster.elect()
    with_learner(cluster, "2")
    with_learner(cluster, "3")
    assert leader.voters == ("1",) and leader.learners == ("2", "3")
    cluster.cut = {"2", "3"}
    index = leader.propose(b"x")
    cluster.stabilize()
    assert leader.log.committed == index
    for _ in range(3 * leader.config.election_ticks):  # check-quorum counts voters only
        leader.tick()
        cluster.stabilize()
    assert leader.role == Role.LEADER


def test_a_learner_never_campaigns() -> None:
    cluster = Cluster()
    cluster.elect()
    learner = with_learner(cluster)
    cluster.cut = {"1", "2", "3"}  # it hears from no leader, ever
    learner.campaign()
    for _ in range(5 * learner.config.election_ticks):
        learner.tick()
        assert learner.role == Role.FOLLOWER
    sent = cluster.stabilize()
    assert not [m for m in sent if m.sender == "4" and m.type in (MessageType.VOTE, MessageType.PRE_VOTE)]


def test_a_learners_vote_does_not_count() -> None:
    """Voters 1, 2, 3 and learner 4; the leader is gone and 3 is cut off: 2 and the learner
    are two of four members but one of three voters, and no leader is elected."""
    cluster = Cluster()
    cluster.elect("1")
    with_learner(cluster)
    cluster.cut = {"1", "3"}
    candidate = cluster.cores["2"]
    for _ in range(10 * candidate.config.election_ticks):
        for node in ("2", "4"):
            cluster.cores[node].tick()
        cluster.stabilize()
        assert candidate.role != Role.LEADER
    assert quorum.vote_result(candidate.voters, {"2": True, "4": True}) == quorum.VoteResult.PENDING


def test_leadership_is_never_transferred_to_a_learner() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    with_learner(cluster)
    cluster.cut = {"2", "3"}
    leader.propose(b"only the learner has this")
    cluster.stabilize()
    cluster.cut = set()
    with pytest.raises(ProposalDropped):
        leader.transfer_leadership("4")
    assert leader.transfer_leadership() in ("2", "3")


def test_a_caught_up_learner_is_named_and_promoted_to_voter() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    assert leader.caught_up_learners(16) == []
    with_learner(cluster)
    assert leader.caught_up_learners(16) == ["4"]
    assert cluster.cores["2"].caught_up_learners(16) == []  # only the leader decides
    with pytest.raises(ProposalDropped):
        leader.propose_conf_change(ConfChange(ConfChangeOp.ADD_LEARNER, "4"))  # already a member
    leader.propose_conf_change(ConfChange(ConfChangeOp.ADD, "4"))
    cluster.stabilize()
    for core in cluster.cores.values():
        assert core.voters == ("1", "2", "3", "4") and core.learners == ()
    assert leader.caught_up_learners(16) == []


def test_a_learner_far_behind_or_silent_is_not_caught_up() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    with_learner(cluster)
    cluster.cut = {"4"}
    for n in range(20):
        leader.propose(b"%d" % n)
        cluster.stabilize()
    assert leader.caught_up_learners(16) == []  # 20 entries behind the commit
    assert leader.caught_up_learners(64) == ["4"]
    for _ in range(leader.config.election_ticks):  # silent for an election timeout
        leader.tick()
        cluster.stabilize()
    assert leader.caught_up_learners(64) == []


def test_a_learner_that_only_acknowledged_its_snapshot_is_not_caught_up() -> None:
    """Its acknowledgement of the snapshot leaves before it fetched what the snapshot stands
    for (a stream's messages); a replica answers nothing more until it has. Only an entry
    acknowledged after the snapshot says it is done."""
    cluster = Cluster(voters=("1",))
    leader = cluster.elect()
    for n in range(5):
        leader.propose(b"%d" % n)
    cluster.stabilize()
    applied = leader.log.applied
    cluster.stores["1"].compact(Snapshot(SnapshotMeta(applied, leader.log.term(applied), leader.conf_state()), b"s"))
    paused = {"4"}
    learner_store = MemoryStorage(ConfState())
    learner = RaftCore(RaftConfig(id="4"), learner_store, random.Random(7))
    leader.propose_conf_change(ConfChange(ConfChangeOp.ADD_LEARNER, "4"))
    for _ in range(20):  # the leader's Readies flow; the learner answers once, then pauses
        inbox = []
        for core, store in ((leader, cluster.stores["1"]), (learner, learner_store)):
            if core.id in paused and core.log.applied >= applied:
                continue  # it applied the snapshot: fetching its data, answering nothing
            if core.has_ready():
                ready = core.ready()
                if ready.snapshot is not None:
                    store.apply_snapshot(ready.snapshot)
                store.save(ready.hard_state, ready.entries, sync=True)
                inbox.extend(ready.messages)
                core.advance(ready)
        for message in inbox:
            (leader if message.to == "1" else learner).step(message)
    progress = leader.progress["4"]
    assert progress.snapshot_sent == applied and progress.match == applied
    assert leader.log.committed - progress.match <= 16
    assert leader.caught_up_learners(16) == []
    paused.clear()  # the data is fetched: it answers the appends it holds
    for _ in range(20):
        inbox = []
        for core, store in ((leader, cluster.stores["1"]), (learner, learner_store)):
            if core.has_ready():
                ready = core.ready()
                store.save(ready.hard_state, ready.entries, sync=True)
                inbox.extend(ready.messages)
                core.advance(ready)
        for message in inbox:
            (leader if message.to == "1" else learner).step(message)
    assert progress.match > applied
    assert leader.caught_up_learners(16) == ["4"]


def test_an_idle_learner_past_its_snapshot_waits_for_an_entry_after_it() -> None:
    cluster = Cluster(voters=("1",))
    leader = cluster.elect()
    leader.learners = ("4",)
    leader.progress["4"] = leader._new_progress(leader.log.last_index() + 1)
    progress = leader.progress["4"]
    progress.snapshot_sent = progress.match = leader.log.last_index()
    progress.become_replicate()
    assert leader.awaits_entry_after_snapshot() and leader.caught_up_learners(16) == []
    leader.propose(b"")
    assert not leader.awaits_entry_after_snapshot()


def test_removing_a_learner_and_what_may_not_be_proposed() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    with_learner(cluster)
    with pytest.raises(ProposalDropped):
        leader.propose_conf_change(ConfChange(ConfChangeOp.ADD_LEARNER, "2"))  # a voter
    leader.propose_conf_change(ConfChange(ConfChangeOp.REMOVE, "4"))
    cluster.stabilize()
    assert leader.learners == () and "4" not in leader.progress
    with pytest.raises(ProposalDropped):
        leader.propose_conf_change(ConfChange(ConfChangeOp.REMOVE, "4"))


def test_a_restart_resumes_the_membership_of_the_applied_index() -> None:
    """A state machine that holds its applied entries by itself (a stream's store) is not
    replayed the entries up to its applied index: their membership changes are read on start
    (before, a restarted replica came back with its snapshot's voters only)."""
    changes = [ConfChange(ConfChangeOp.ADD_LEARNER, "b", ("a",), ("b",)),
               ConfChange(ConfChangeOp.ADD, "b", ("a", "b")),
               ConfChange(ConfChangeOp.ADD_LEARNER, "c", ("a", "b"), ("c",))]
    storage = MemoryStorage(ConfState(("a",)))
    entries = [Entry(1, 1)] + [Entry(1, 2 + i, EntryType.CONF_CHANGE, encode_conf_change(c))
                               for i, c in enumerate(changes)] + [Entry(1, 5, EntryType.NORMAL, b"m")]
    storage.save(HardState(1, "a", 5), entries, sync=True)
    core = RaftCore(RaftConfig(id="a"), storage, random.Random(1), applied=5)
    assert core.voters == ("a", "b") and core.learners == ("c",)
    core = RaftCore(RaftConfig(id="a"), storage, random.Random(1), applied=3)
    assert core.voters == ("a", "b") and core.learners == ()  # the rest is applied again
    ready = core.ready()
    core.advance(ready)
    assert core.voters == ("a", "b") and core.learners == ("c",)


def test_learners_round_trip_in_change_entries_snapshots_and_messages() -> None:
    change = ConfChange(ConfChangeOp.ADD_LEARNER, "n4", ("n1", "n2", "n3"), ("n4", "n5"))
    assert decode_conf_change(encode_conf_change(change)) == change
    old = ConfChange(ConfChangeOp.ADD, "n3", ("n1", "n3"))  # without learners: the old bytes
    assert encode_conf_change(old) == encode_conf_change(ConfChange(ConfChangeOp.ADD, "n3", ("n1", "n3"), ()))
    assert decode_conf_change(encode_conf_change(old)) == old
    for bad in (ConfChange(ConfChangeOp.ADD, "x", ("a",), ("a",)), ConfChange(ConfChangeOp.ADD, "x", ("a",), ("c", "b"))):
        with pytest.raises(CorruptData):
            decode_conf_change(encode_conf_change(bad))
    snapshot = Snapshot(SnapshotMeta(9, 2, ConfState(("a", "b"), ("c",))), b"data")
    message = Message(MessageType.SNAPSHOT, "a", "c", term=2, snapshot=snapshot)
    assert decode_message(encode_message(message)) == message
    plain = Message(MessageType.SNAPSHOT, "a", "c", term=2, snapshot=Snapshot(SnapshotMeta(9, 2, ConfState(("a",))), b""))
    assert decode_message(encode_message(plain)) == plain


def test_membership_arithmetic() -> None:
    conf = ConfState(("a",))
    conf = apply_to(conf, ConfChangeOp.ADD_LEARNER, "b")
    assert conf == ConfState(("a",), ("b",))
    assert apply_to(conf, ConfChangeOp.ADD_LEARNER, "a") == conf  # a voter is never demoted
    assert apply_to(conf, ConfChangeOp.ADD, "b") == ConfState(("a", "b"))
    assert apply_to(conf, ConfChangeOp.REMOVE, "b") == ConfState(("a",))
    assert conf.members() == ("a", "b")
