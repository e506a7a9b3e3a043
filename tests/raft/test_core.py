"""RaftCore behaviours that read best as small scenarios (the transcripts cover the paper's)."""

import random

import pytest

from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.raft.core import RaftCore
from appliance.raft.progress import ProgressState
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import (
    ConfChange,
    ConfChangeOp,
    ConfState,
    Message,
    MessageType,
    RaftConfig,
    Role,
)

VOTERS = ("1", "2", "3")


class Cluster:
    """Three cores (or `voters`) wired by hand: deliver everything until quiet."""

    def __init__(self, voters: tuple[str, ...] = VOTERS, **config: int | bool) -> None:
        self.stores = {i: MemoryStorage(ConfState(voters)) for i in voters}
        self.cores = {i: RaftCore(RaftConfig(id=i, **config), self.stores[i], random.Random(int(i)))  # type: ignore[arg-type]
                      for i in voters}
        self.cut: set[str] = set()  # nodes cut off from everyone
        self.cut_links: set[frozenset[str]] = set()  # pairs of nodes that cannot talk

    def stabilize(self, rounds: int = 100) -> list[Message]:
        sent: list[Message] = []
        for _ in range(rounds):
            inbox: list[Message] = []
            for node_id, core in self.cores.items():
                if core.has_ready():
                    ready = core.ready()
                    self.stores[node_id].save(ready.hard_state, ready.entries, sync=ready.must_sync)
                    inbox.extend(ready.messages)
                    core.advance(ready)
            if not inbox:
                return sent
            for message in inbox:
                sent.append(message)
                if (message.to in self.cores and message.to not in self.cut and message.sender not in self.cut
                        and frozenset((message.sender, message.to)) not in self.cut_links):
                    self.cores[message.to].step(message)
        raise AssertionError("did not stabilize")

    def elect(self, node_id: str = "1") -> RaftCore:
        self.cores[node_id].campaign()
        self.stabilize()
        assert self.cores[node_id].role == Role.LEADER
        return self.cores[node_id]


def test_a_follower_refuses_proposals_and_names_the_leader() -> None:
    cluster = Cluster()
    cluster.elect("1")
    with pytest.raises(NotLeader) as raised:
        cluster.cores["2"].propose(b"x")
    assert raised.value.leader_hint == "1"


def test_the_leader_refuses_proposals_beyond_the_uncommitted_limit() -> None:
    cluster = Cluster(uncommitted_entries_max=3)
    leader = cluster.elect()
    cluster.cut = {"2", "3"}
    leader.propose_many([b"a", b"b", b"c"])
    with pytest.raises(LimitExceeded):
        leader.propose(b"d")


def test_only_one_membership_change_is_pending_at_a_time() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose_conf_change(ConfChange(ConfChangeOp.ADD, "4"))
    with pytest.raises(ProposalDropped):
        leader.propose_conf_change(ConfChange(ConfChangeOp.REMOVE, "3"))
    cluster.stabilize()
    assert leader.voters == ("1", "2", "3", "4")
    leader.propose_conf_change(ConfChange(ConfChangeOp.REMOVE, "4"))


def test_in_flight_appends_per_follower_are_bounded_by_the_window() -> None:
    cluster = Cluster(inflight_msgs_max=2, append_bytes_max=1)
    leader = cluster.elect()
    cluster.cut = {"2", "3"}
    leader.propose_many([b"a", b"b", b"c", b"d", b"e"])
    ready = leader.ready()
    leader.advance(ready)
    to_two = [m for m in ready.messages if m.to == "2" and m.type == MessageType.APPEND]
    assert len(to_two) == 2
    assert leader.progress["2"].state == ProgressState.REPLICATE
    assert leader.progress["2"].inflights.full()


def test_proposals_between_two_readies_go_out_as_one_append() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose(b"a")
    leader.propose(b"b")
    ready = leader.ready()
    leader.advance(ready)
    appends = [m for m in ready.messages if m.to == "2"]
    assert len(appends) == 1
    assert [e.data for e in appends[0].entries] == [b"a", b"b"]


def test_a_partitioned_leader_steps_down_after_an_election_timeout() -> None:
    cluster = Cluster(check_quorum=True)
    leader = cluster.elect()
    cluster.cut = {"1"}
    for _ in range(2 * leader.config.election_ticks):
        leader.tick()
    assert leader.role == Role.FOLLOWER


def test_transfer_to_the_most_up_to_date_peer_hands_over_leadership() -> None:
    cluster = Cluster(pre_vote=True, check_quorum=True)
    leader = cluster.elect()
    leader.propose(b"x")
    cluster.stabilize()
    target = leader.transfer_leadership()
    assert target == "2"
    with pytest.raises(ProposalDropped):
        leader.propose(b"during")
    cluster.stabilize()
    assert cluster.cores["2"].role == Role.LEADER
    assert leader.role == Role.FOLLOWER


def test_a_removed_leader_steps_down_and_the_rest_elect_a_new_one() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose_conf_change(ConfChange(ConfChangeOp.REMOVE, "1"))
    cluster.stabilize()
    assert leader.role == Role.FOLLOWER
    assert [c.role for c in (cluster.cores["2"], cluster.cores["3"])].count(Role.LEADER) == 1


def test_status_reports_follower_progress_and_contact() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.tick()
    status = leader.status()
    assert [p.peer for p in status.peers] == ["2", "3"]
    assert all(p.match == status.last_index for p in status.peers)
    assert all(p.ticks_since_contact == 1 for p in status.peers)


def test_a_joining_server_learns_the_whole_membership_from_the_change_that_adds_it() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    cluster.stores["4"] = MemoryStorage(ConfState())
    cluster.cores["4"] = RaftCore(RaftConfig(id="4"), cluster.stores["4"], random.Random(4))
    leader.propose_conf_change(ConfChange(ConfChangeOp.ADD, "4"))
    cluster.stabilize()
    assert cluster.cores["4"].voters == ("1", "2", "3", "4")
    assert cluster.cores["4"].log.applied == leader.log.applied


def test_conf_change_entries_round_trip_and_reject_garbage() -> None:
    from appliance.errors import CorruptData
    from appliance.raft.confchange import decode_conf_change, encode_conf_change

    change = ConfChange(ConfChangeOp.REMOVE, "n2", ("n1", "n3"))
    assert decode_conf_change(encode_conf_change(change)) == change
    for garbage in (b"", b"\x09", encode_conf_change(change)[:-1], encode_conf_change(change) + b"x"):
        with pytest.raises(CorruptData):
            decode_conf_change(garbage)


# --- peer_gone: the connection to a peer's host closed (fast failover) ---------------------------

def tick_until_leader(cluster: Cluster, nodes: tuple[str, ...],
                      ticks_max: int) -> tuple[int, RaftCore | None]:
    """Tick `nodes` (and deliver) until one of them leads; (ticks taken, leader or None)."""
    for tick in range(1, ticks_max + 1):
        for node in nodes:
            cluster.cores[node].tick()
        cluster.stabilize()
        leaders = [cluster.cores[n] for n in nodes if cluster.cores[n].role == Role.LEADER]
        if leaders:
            return tick, leaders[0]
    return ticks_max, None


def test_without_peer_gone_the_followers_of_a_dead_leader_wait_a_whole_election_timeout() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    cluster.cut = {"1"}
    ticks, new_leader = tick_until_leader(cluster, ("2", "3"), 3 * leader.config.election_ticks)
    assert new_leader is not None
    assert ticks >= leader.config.election_ticks  # the lease and the timeout: 1..2 s on the worker clock


def test_the_followers_of_a_gone_leader_elect_a_new_one_within_a_few_ticks() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose(b"before")
    cluster.stabilize()
    cluster.cut = {"1"}
    for node in ("2", "3"):
        cluster.cores[node].peer_gone("1")
        assert cluster.cores[node].lead == ""  # no longer defends the dead leader's lease
    ticks, new_leader = tick_until_leader(cluster, ("2", "3"), 3 * leader.config.election_ticks)
    assert new_leader is not None
    assert ticks <= 1 + leader.config.leader_gone_slot_ticks  # the first slot won; no split vote
    assert new_leader.term == leader.term + 1
    assert new_leader.log.slice(1, new_leader.log.last_index() + 1, 1 << 30)[1].data == b"before"
    new_leader.propose(b"after")
    cluster.stabilize()
    assert cluster.cores["2"].log.committed == cluster.cores["3"].log.committed == new_leader.log.last_index()


def test_the_survivors_campaign_in_distinct_slots() -> None:
    voters = ("1", "2", "3", "4", "5")
    cluster = Cluster(voters)
    cluster.elect("1")
    slots = []
    for node in voters[1:]:
        core = cluster.cores[node]
        core.peer_gone("1")
        slots.append(core.randomized_election_ticks)
    assert sorted(slots) == [1 + i * cluster.cores["2"].config.leader_gone_slot_ticks for i in range(4)]


def test_a_voter_that_saw_the_route_go_down_too_grants_the_early_campaign() -> None:
    """3 has not reached its own slot yet but forgot the leader: it grants 2's (pre-)vote at once."""
    cluster = Cluster()
    leader = cluster.elect()
    cluster.cut = {"1"}
    two, three = cluster.cores["2"], cluster.cores["3"]
    two.peer_gone("1")
    three.peer_gone("1")
    first, second = sorted((two, three), key=lambda core: core.randomized_election_ticks)
    for _ in range(first.randomized_election_ticks):
        first.tick()
    cluster.stabilize()
    assert first.role == Role.LEADER and second.lead == first.id
    assert first.term == leader.term + 1


def test_a_gone_peer_that_is_not_our_leader_changes_nothing() -> None:
    cluster = Cluster()
    cluster.elect()
    two = cluster.cores["2"]
    timeout = two.randomized_election_ticks
    two.peer_gone("3")
    assert two.lead == "1" and two.randomized_election_ticks == timeout and not two.fast_election
    leader = cluster.cores["1"]
    leader.peer_gone("2")  # a leader keeps leading; check-quorum decides about a lost majority
    assert leader.role == Role.LEADER


def test_a_flapping_route_to_a_live_leader_costs_no_election_and_loses_nothing() -> None:
    """The route 1-2 drops (2 hears peer_gone), 1 still leads 3: 2's early campaign is ignored by
    both (their lease), 2 goes back to a full timeout, and once the route is back it follows 1."""
    cluster = Cluster()
    leader = cluster.elect()
    leader.propose(b"a")
    cluster.stabilize()
    term = leader.term
    two = cluster.cores["2"]
    cluster.cut_links = {frozenset(("1", "2"))}
    two.peer_gone("1")
    sent = []
    for _ in range(two.randomized_election_ticks):
        two.tick()
        sent += cluster.stabilize()
    assert two.role == Role.PRE_CANDIDATE
    assert any(m.type == MessageType.PRE_VOTE and m.sender == "2" for m in sent)
    assert not two.fast_election and two.randomized_election_ticks >= two.config.election_ticks
    assert leader.role == Role.LEADER and leader.term == term
    assert cluster.cores["3"].lead == "1" and cluster.cores["3"].term == term
    leader.propose(b"b")  # committed by 1 and 3 while 2 is away
    cluster.stabilize()
    cluster.cut_links = set()
    for _ in range(3 * leader.config.heartbeat_ticks):  # the append lost on the way is resent
        leader.tick()
        cluster.stabilize()
    assert two.role == Role.FOLLOWER and two.lead == "1"
    assert leader.role == Role.LEADER and leader.term == term
    entries = [e.data for e in two.log.slice(1, two.log.last_index() + 1, 1 << 30) if e.data]
    assert entries == [b"a", b"b"] and two.log.committed == leader.log.committed


def test_hearing_from_the_leader_again_cancels_the_early_campaign() -> None:
    cluster = Cluster()
    leader = cluster.elect()
    two = cluster.cores["2"]
    two.peer_gone("1")
    assert two.fast_election
    for _ in range(leader.config.heartbeat_ticks):
        leader.tick()
    cluster.stabilize()
    assert two.lead == "1" and not two.fast_election
    assert two.randomized_election_ticks >= two.config.election_ticks
    for _ in range(leader.config.election_ticks - 1):  # no heartbeat for a while: still no campaign
        two.tick()
    assert two.role == Role.FOLLOWER


def test_without_pre_vote_peer_gone_starts_no_early_election() -> None:
    """A plain candidate raises the term: an early campaign after a mere flap would depose a live leader."""
    cluster = Cluster(pre_vote=False)
    cluster.elect()
    two = cluster.cores["2"]
    two.peer_gone("1")
    assert two.lead == "1" and not two.fast_election


def test_a_follower_whose_log_was_lost_is_sent_it_again_not_crashed_by_the_commit() -> None:
    """A follower restarted with its log gone (a wiped store) hears a heartbeat whose commit is
    beyond its last index: it says where its log ends, the leader probes it from there and it
    holds every committed entry again (before: an assertion on the follower, for ever)."""
    cluster = Cluster()
    leader = cluster.elect()
    for n in range(5):
        leader.propose(b"e%d" % n)
    cluster.stabilize()
    committed = leader.log.committed
    assert cluster.cores["3"].log.last_index() == committed
    cluster.stores["3"] = MemoryStorage(ConfState(VOTERS))  # wiped and restarted
    cluster.cores["3"] = RaftCore(RaftConfig(id="3"), cluster.stores["3"], random.Random(3))
    for _ in range(RaftConfig(id="1").heartbeat_ticks):
        leader.tick()
    sent = cluster.stabilize()
    assert any(m.type == MessageType.HEARTBEAT_RESP and m.reject for m in sent)
    wiped = cluster.cores["3"]
    assert wiped.log.last_index() >= committed and wiped.log.committed >= committed
    assert wiped.log.term(committed) == leader.log.term(committed)


def _lose_state(cluster: Cluster, node_id: str, *, abstain: bool) -> RaftCore:
    """`node_id` restarts with its store wiped; `abstain`: it knows (the jetstream ledger said so)."""
    cluster.stores[node_id] = MemoryStorage(ConfState(VOTERS))
    core = RaftCore(RaftConfig(id=node_id), cluster.stores[node_id], random.Random(int(node_id)))
    if abstain:
        core.abstain()
    cluster.cores[node_id] = core
    return core


def _committed_without(cluster: Cluster, stale: str) -> tuple[RaftCore, int]:
    """Node 1 leads and commits five entries with node 3 while `stale` is cut off."""
    leader = cluster.elect("1")
    cluster.cut = {stale}
    for n in range(5):
        leader.propose(b"e%d" % n)
    cluster.stabilize()
    assert cluster.cores[stale].log.last_index() < leader.log.committed
    return leader, leader.log.committed


@pytest.mark.parametrize("abstain", [False, True])
def test_a_voter_that_lost_its_state_does_not_elect_a_candidate_missing_committed_entries(abstain: bool) -> None:
    """Entries committed by 1 and 3; 1 goes down, 3 comes back wiped. Its empty log would grant
    its vote to the stale 2, whose term would then lose the committed entries (the case without
    abstain shows it). Abstaining, it refuses; 1 returns and leads; 3 catches up and votes again."""
    cluster = Cluster()
    _, committed = _committed_without(cluster, stale="2")
    cluster.cut = {"1"}
    wiped = _lose_state(cluster, "3", abstain=abstain)
    stale = cluster.cores["2"]
    stale.campaign()
    cluster.stabilize()
    if not abstain:  # the hazard: a leader without the committed entries
        assert stale.role == Role.LEADER and stale.log.last_index() < committed
        return
    assert stale.role != Role.LEADER and wiped.vote == "" and wiped.abstaining
    for _ in range(3 * wiped.config.election_ticks):  # nor does it campaign itself
        wiped.tick()
        cluster.stabilize()
        assert wiped.role == Role.FOLLOWER
    cluster.cut = set()
    returned = cluster.cores["1"]
    returned.campaign()
    cluster.stabilize()
    assert returned.role == Role.LEADER
    for _ in range(returned.config.heartbeat_ticks):
        returned.tick()
    cluster.stabilize()
    assert not wiped.abstaining and wiped.log.last_index() >= committed
    assert wiped.log.term(committed) == returned.log.term(committed)


def test_an_abstaining_voter_ignores_a_leadership_transfer_and_grants_no_pre_vote() -> None:
    cluster = Cluster()
    leader = cluster.elect("1")
    wiped = _lose_state(cluster, "3", abstain=True)
    wiped.step(Message(MessageType.TIMEOUT_NOW, "1", "3", term=leader.term))
    assert wiped.role == Role.FOLLOWER and not wiped.messages
    wiped.step(Message(MessageType.PRE_VOTE, "2", "3", term=leader.term + 1, log_term=leader.term,
                       index=leader.log.last_index()))
    assert [(m.type, m.reject) for m in wiped.messages] == [(MessageType.PRE_VOTE_RESP, True)]
