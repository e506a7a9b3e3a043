"""RaftGroup's learners: a joiner added with add_learner fetches a snapshot's data while the
group keeps committing, and the leader promotes it to voter only once it has (hand-cranked
loop and network of tests/cluster/test_group_api.py; no sockets, no real clock)."""

import random

from appliance.cluster.group import RaftGroup
from appliance.cluster.registry import GroupRegistry
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, RaftConfig
from tests.cluster.test_group_api import Cluster, Machine


class FetchingMachine(Machine):
    """A state machine whose restore must fetch data first (a stream replica catching up):
    it pauses its group's apply until the test says the data arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.group: RaftGroup | None = None
        self.fetching = False

    def restore(self, data: bytes) -> None:
        super().restore(data)
        assert self.group is not None
        self.group.pause_apply()
        self.fetching = True

    def fetched(self) -> None:
        assert self.group is not None and self.fetching
        self.fetching = False
        self.group.resume_apply()


def joiner(cluster: Cluster, peer: str) -> FetchingMachine:
    registry = cluster.net.registries.setdefault(peer, GroupRegistry(cluster.net.endpoint(peer)))
    machine = FetchingMachine()
    group = RaftGroup(group_id="S-1", config=RaftConfig(id=peer), storage=MemoryStorage(ConfState()),
                      transport=registry.outbox("S-1"), state_machine=machine, clock=cluster.clock,
                      rng=random.Random(peer), scheduler=cluster.loop, snapshot_entries=4)
    machine.group = group
    registry.add(group)
    cluster.groups[peer], cluster.machines[peer] = group, machine
    return machine


def ticks(cluster: Cluster, count: int) -> None:
    for _ in range(count):
        cluster.clock.advance(0.1)
        for registry in cluster.net.registries.values():
            registry.tick()
        cluster.settle()


def single_voter(entries: int) -> tuple[Cluster, RaftGroup]:
    """A one-voter group (an R1 stream) that compacted its log into a snapshot."""
    cluster = Cluster(peers=())
    registry = GroupRegistry(cluster.net.endpoint("a"))
    cluster.net.registries["a"] = registry
    machine = Machine()
    leader = RaftGroup(group_id="S-1", config=RaftConfig(id="a"), storage=MemoryStorage(ConfState(("a",))),
                       transport=registry.outbox("S-1"), state_machine=machine, clock=cluster.clock,
                       rng=random.Random(1), scheduler=cluster.loop, snapshot_entries=4)
    registry.add(leader)
    cluster.groups["a"], cluster.machines["a"] = leader, machine
    leader.campaign()
    cluster.settle()
    for n in range(entries):
        leader.propose(b"m%d" % n)
        cluster.settle()
    assert leader.is_leader()
    return cluster, leader


def test_joiners_fetch_as_learners_while_the_voter_commits_and_are_promoted_once_fetched() -> None:
    cluster, leader = single_voter(10)
    assert leader.storage.first_index() > 1  # compacted: a joiner needs the snapshot
    fetching = {peer: joiner(cluster, peer) for peer in ("b", "c")}
    leader.add_learner("b")
    cluster.settle()
    leader.add_learner("c")
    ticks(cluster, 3)
    assert all(machine.fetching for machine in fetching.values())  # both installed the snapshot
    assert leader.voters() == ("a",) and leader.learners() == ("b", "c")
    done: list[bool] = []
    for n in range(10):  # publishes go on: the learners count for no quorum
        leader.propose(b"during %d" % n, lambda ok, _i: done.append(ok))
        cluster.settle()
    ticks(cluster, 30)  # three election timeouts: a fetching learner is never promoted
    assert done == [True] * 10
    assert leader.voters() == ("a",) and leader.is_leader()
    assert [(p.peer, p.current, p.learner) for p in leader.peers()] == [("b", False, True), ("c", False, True)]
    fetching["b"].fetched()
    ticks(cluster, 3)
    assert leader.voters() == ("a", "b") and leader.learners() == ("c",)
    assert cluster.groups["b"].voters() == ("a", "b")
    leader.propose(b"after b", lambda ok, _i: done.append(ok))  # a and b: the one still fetching is not needed
    ticks(cluster, 1)
    assert done[-1] is True
    fetching["c"].fetched()
    ticks(cluster, 3)
    assert leader.voters() == ("a", "b", "c") and leader.learners() == ()
    assert cluster.machines["b"].data == cluster.machines["c"].data == cluster.machines["a"].data


def test_a_learner_of_an_idle_group_is_promoted_too() -> None:
    """Its last acknowledgement is the snapshot's and the log holds nothing after it: the leader
    appends an empty entry for it to acknowledge once it has fetched."""
    cluster, leader = single_voter(2)  # entries 1..3; the learner's entry (4) is compacted at once
    fetching = joiner(cluster, "b")
    leader.add_learner("b")
    ticks(cluster, 3)
    assert fetching.fetching and leader.learners() == ("b",)
    assert leader.storage.snapshot().meta.index == 4 and leader.core.progress["b"].snapshot_sent == 4
    assert leader.core.log.last_index() == 5  # the empty entry appended for it
    fetching.fetched()
    ticks(cluster, 5)
    assert leader.voters() == ("a", "b") and leader.learners() == ()
    assert cluster.machines["b"].data == cluster.machines["a"].data
