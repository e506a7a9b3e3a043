"""RaftGroup, the driver: the Ready order, batching, backpressure, acks, snapshots, restart."""

import random
from collections.abc import Sequence

import pytest

from appliance.clock import ManualClock
from appliance.cluster.group import RaftGroup
from appliance.cluster.raft_storage import DurableStorage
from appliance.errors import LimitExceeded, NotLeader
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, Entry, HardState, Message, RaftConfig, Snapshot
from appliance.testing.sim.disk import SimDisk

VOTERS = ("a", "b", "c")


class Journal:
    """Records persist/send/apply in the order the driver does them."""

    def __init__(self) -> None:
        self.events: list[str] = []


class RecordingStorage(MemoryStorage):
    def __init__(self, journal: Journal, name: str) -> None:
        super().__init__(ConfState(VOTERS))
        self.journal, self.name, self.syncs = journal, name, 0

    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        if entries:
            self.journal.events.append(f"{self.name} persist {entries[0].index}..{entries[-1].index}")
        self.syncs += int(sync)
        super().save(hard_state, entries, sync=sync)


class Outbox:
    def __init__(self, journal: Journal, name: str) -> None:
        self.journal, self.name, self.messages = journal, name, []  # type: ignore[var-annotated]

    def send(self, messages: Sequence[Message]) -> None:
        if messages:
            self.journal.events.append(f"{self.name} send {len(messages)}")
        self.messages.extend(messages)


class Machine:
    def __init__(self, journal: Journal | None = None, name: str = "") -> None:
        self.journal, self.name, self.data = journal, name, []  # type: ignore[var-annotated]

    def apply(self, entries: Sequence[Entry]) -> None:
        if self.journal is not None:
            self.journal.events.append(f"{self.name} apply {entries[0].index}..{entries[-1].index}")
        self.data.extend(e.data for e in entries if e.data)

    def applied_index(self) -> int:
        return 0  # in memory only: rebuilt from the raft snapshot and log after a restart

    def snapshot(self) -> bytes:
        return b"\n".join(self.data)

    def restore(self, data: bytes) -> None:
        self.data = data.split(b"\n") if data else []


class Trio:
    def __init__(self, *, snapshot_entries: int = 1000, pending_max: int = 64, durable: bool = False) -> None:
        self.journal = Journal()
        self.clock = ManualClock()
        self.disks = {name: SimDisk() for name in VOTERS}
        self.durable = durable
        self.snapshot_entries, self.pending_max = snapshot_entries, pending_max
        self.groups = {name: self._group(name) for name in VOTERS}
        self.down: set[str] = set()

    def _group(self, name: str) -> RaftGroup:
        storage = (DurableStorage(self.disks[name], "g", bootstrap=ConfState(VOTERS)) if self.durable
                   else RecordingStorage(self.journal, name))
        return RaftGroup(group_id="g", config=RaftConfig(id=name), storage=storage,
                         transport=Outbox(self.journal, name), state_machine=Machine(self.journal, name),
                         clock=self.clock, rng=random.Random(name), snapshot_entries=self.snapshot_entries,
                         proposals_pending_max=self.pending_max)

    def restart(self, name: str) -> None:
        self.groups[name] = self._group(name)

    def run(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            busy = False
            for group in self.groups.values():
                busy |= group.process_ready()
            for name, group in self.groups.items():
                outbox: Outbox = group.transport  # type: ignore[assignment]
                pending, outbox.messages = outbox.messages, []
                for message in pending:
                    busy = True
                    if message.to not in self.down and name not in self.down:
                        self.groups[message.to].step(message)
            if not busy:
                return
        raise AssertionError("did not settle")

    def settle_leader(self, *, among: tuple[str, ...]) -> RaftGroup:
        """Let time pass (ticks from the clock) until one of `among` leads and all of them follow it."""
        for _ in range(200):
            self.clock.advance(0.1)
            for name in among:
                self.groups[name].tick()
            self.run()
            leaders = [self.groups[name] for name in among if self.groups[name].is_leader()]
            if len(leaders) == 1 and all(self.groups[n].leader() == leaders[0].core.id for n in among):
                applied = {self.groups[n].core.log.applied for n in among}
                if applied == {leaders[0].core.log.last_index()}:
                    return leaders[0]
        raise AssertionError("no leader settled")

    def elect(self, name: str = "a") -> RaftGroup:
        self.groups[name].core.campaign()
        self.run()
        assert self.groups[name].is_leader()
        return self.groups[name]


def test_every_ready_is_persisted_then_sent_then_applied() -> None:
    trio = Trio()
    leader = trio.elect()
    trio.journal.events.clear()
    leader.propose(b"x")
    trio.run()
    events = trio.journal.events
    # the leader's appends leave before its own fsync (followers fsync alongside it); a follower
    # answers only once the entries are on its disk; nothing applies before its Ready persisted
    assert events.index("a send 2") < events.index("a persist 2..2") < events.index("a apply 2..2")
    assert events.index("b persist 2..2") < events.index("b send 1")


def test_a_leader_applies_what_committed_before_it_sends_the_commit_notices() -> None:
    trio = Trio()
    leader = trio.elect()
    trio.journal.events.clear()
    leader.propose(b"x")
    trio.run()
    mine = [e for e in trio.journal.events if e.startswith("a ")]
    # appends out, own fsync, then (the followers answered) apply — whose answers (PubAcks) leave
    # first — and only then the commit index to the followers
    assert mine == ["a send 2", "a persist 2..2", "a apply 2..2", "a send 2"]


def test_proposals_made_while_a_ready_is_in_flight_share_one_append_and_one_fsync() -> None:
    trio = Trio()
    leader = trio.elect()
    storage: RecordingStorage = leader.storage  # type: ignore[assignment]
    syncs = storage.syncs
    for data in (b"1", b"2", b"3"):
        leader.propose(data)
    assert leader.process_ready()
    outbox: Outbox = leader.transport  # type: ignore[assignment]
    to_b = [m for m in outbox.messages if m.to == "b"]
    assert [len(m.entries) for m in to_b] == [3]
    assert storage.syncs == syncs + 1


def test_a_full_proposal_queue_pushes_back() -> None:
    trio = Trio(pending_max=2)
    leader = trio.elect()
    leader.propose(b"1")
    leader.propose(b"2")
    with pytest.raises(LimitExceeded):
        leader.propose(b"3")


def test_followers_refuse_proposals() -> None:
    trio = Trio()
    trio.elect()
    with pytest.raises(NotLeader):
        trio.groups["b"].propose(b"x")


def test_ticks_follow_the_clock() -> None:
    trio = Trio()
    group = trio.groups["a"]
    trio.clock.advance(1.0)
    assert group.tick() == 10
    assert group.tick() == 0


def test_a_proposal_is_acknowledged_once_applied_and_failed_when_overwritten() -> None:
    trio = Trio()
    leader = trio.elect()
    outcomes: list[tuple[bool, int]] = []
    leader.propose(b"kept", lambda ok, index: outcomes.append((ok, index)))
    trio.run()
    assert outcomes == [(True, 2)]
    trio.down = {"a"}
    leader.propose(b"lost", lambda ok, index: outcomes.append((ok, index)))
    trio.run()
    new_leader = trio.settle_leader(among=("b", "c"))
    new_leader.propose(b"winner")
    trio.run()
    trio.down = set()
    trio.settle_leader(among=VOTERS)
    assert outcomes[-1] == (False, 3)


def test_the_leader_compacts_and_a_lagging_follower_catches_up_by_snapshot() -> None:
    trio = Trio(snapshot_entries=5)
    leader = trio.elect()
    trio.down = {"c"}
    for i in range(12):
        leader.propose(f"v{i}".encode())
        trio.run()
    assert leader.storage.first_index() > 2
    trio.down = set()
    leader.propose(b"last")
    trio.run()
    follower: Machine = trio.groups["c"].state_machine  # type: ignore[assignment]
    machine: Machine = leader.state_machine  # type: ignore[assignment]
    assert follower.data == machine.data
    assert follower.data[-1] == b"last"


def test_a_restarted_node_recovers_state_from_its_durable_log() -> None:
    trio = Trio(snapshot_entries=4, durable=True)
    leader = trio.elect()
    for i in range(10):
        leader.propose(f"v{i}".encode())
        trio.run()
    before: Machine = trio.groups["b"].state_machine  # type: ignore[assignment]
    expected = list(before.data)
    trio.restart("b")
    trio.run()
    trio.clock.advance(0.5)
    for group in trio.groups.values():
        group.tick()
    trio.run()
    after: Machine = trio.groups["b"].state_machine  # type: ignore[assignment]
    assert after.data == expected
    assert isinstance(trio.groups["b"].storage.snapshot(), Snapshot)


def test_the_leader_reports_replicas_current_and_seen_ago() -> None:
    trio = Trio()
    leader = trio.elect()
    trio.down = {"c"}
    leader.propose(b"x")
    trio.run()
    trio.clock.advance(0.3)
    leader.tick()
    peers = {p.peer: p for p in leader.peers()}
    assert peers["b"].current
    assert not peers["c"].current
    assert peers["c"].seen_ago_s == pytest.approx(0.3)
    assert peers["c"].describe() == "c, outdated, seen 0.30s ago"
    assert peers["b"].describe() == "b, current, seen 0.30s ago"


def test_proposals_push_back_when_the_in_flight_window_to_a_quorum_is_full() -> None:
    trio = Trio()
    leader = trio.elect()
    trio.down = {"b", "c"}
    for round_number in range(leader.core.config.inflight_msgs_max):
        leader.propose(f"r{round_number}".encode())
        trio.run()
    with pytest.raises(LimitExceeded, match="in-flight window"):
        leader.propose(b"one too many")


class CountingFiles(SimDisk):
    def __init__(self) -> None:
        super().__init__()
        self.sync_calls = 0

    def sync(self, name: str) -> None:
        self.sync_calls += 1
        super().sync(name)


def test_the_durable_log_is_fsynced_exactly_when_the_ready_says_must_sync() -> None:
    files = CountingFiles()
    group = RaftGroup(group_id="g", config=RaftConfig(id="solo"), storage=DurableStorage(
        files, "g", bootstrap=ConfState(("solo",))), transport=Outbox(Journal(), "solo"),
        state_machine=Machine(), clock=ManualClock(), rng=random.Random(1))
    group.core.campaign()  # a single voter elects itself: term and vote must be durable
    before = files.sync_calls
    assert group.process_ready()
    assert files.sync_calls == before + 1
    group.propose(b"x")
    before = files.sync_calls
    assert group.process_ready()  # new entries: must_sync
    assert files.sync_calls == before + 1
    group.core.tick()
    before = files.sync_calls
    while group.process_ready():  # only commit/applied moved: no fsync needed
        pass
    assert files.sync_calls == before


class DurableMachine(Machine):
    """A state machine that keeps its own state on disk: it survives restarts with its index."""

    def __init__(self, index: int, data: list[bytes]) -> None:
        super().__init__()
        self.index, self.data = index, list(data)

    def apply(self, entries: Sequence[Entry]) -> None:
        assert entries[0].index == self.index + 1, "never re-applied, never skipped"
        self.index = entries[-1].index
        super().apply(entries)

    def applied_index(self) -> int:
        return self.index


def test_a_durable_state_machine_is_not_fed_what_it_already_holds_after_a_restart() -> None:
    disk, clock = SimDisk(), ManualClock()

    def start(machine: Machine) -> RaftGroup:
        storage = DurableStorage(disk, "g", bootstrap=ConfState(("solo",)))
        return RaftGroup(group_id="g", config=RaftConfig(id="solo"), storage=storage,
                         transport=Outbox(Journal(), "solo"), state_machine=machine, clock=clock,
                         rng=random.Random(1))

    first = DurableMachine(0, [])
    group = start(first)
    group.core.campaign()
    for data in (b"a", b"b", b"c"):
        group.propose(data)
        while group.process_ready():
            pass
    assert first.data == [b"a", b"b", b"c"]
    again = DurableMachine(first.index - 1, first.data[:-1])  # its own disk lost the last apply
    group = start(again)
    while group.process_ready():
        pass
    assert again.data == [b"a", b"b", b"c"]
    assert again.index == first.index


def test_the_report_monitoring_reads() -> None:
    """/raftz's picture of a replica: role, term, vote, commit/applied, the log's extent and append
    times, and the peers each role tracks (the leader every follower's index and contact; a
    follower only its leader's contact)."""
    trio = Trio()
    trio.clock.advance(5.0)
    leader = trio.elect()
    trio.down = {"c"}
    for data in (b"one", b"two"):
        leader.propose(data)
        trio.run()
        trio.clock.advance(0.5)  # the clock only: no ticks, so no election timeout passes
    report = leader.report()
    assert (report.role, report.peer, report.leader, report.voted_for, report.ever_had_leader) == (
        "LEADER", "a", "a", "a", True)
    assert report.committed == report.applied == report.last_index == 3  # the leader's empty entry + 2
    assert (report.first_index, report.log_entries, report.log_bytes, report.last_term) == (1, 3, 6, report.term)
    assert report.first_append_wall_s == trio.clock.wall() - 1.0 and report.last_append_wall_s == trio.clock.wall() - 0.5
    peers = {p.peer: p for p in report.peers}
    assert peers["b"].last_replicated_index == 3 and peers["c"].last_replicated_index < 3
    assert peers["b"].seen_ago_s == 0.0 and peers["c"].seen_ago_s is not None
    follower = trio.groups["b"].report()
    assert (follower.role, follower.leader, follower.leader_since_wall_s) == ("FOLLOWER", "a", None)
    assert [(p.peer, p.last_replicated_index) for p in follower.peers] == [("a", 0), ("c", 0)]
    assert follower.peers[0].seen_ago_s is not None and follower.peers[1].seen_ago_s is None
