"""Values that flow in and out of the RAFT core: entries, messages, hard state, snapshots, Ready.

Everything here is a frozen, slotted dataclass. `MessageType` and `EntryType` go on the wire and on
disk: their values are append-only (never renumber, never reuse).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from appliance import limits

NO_PEER = ""  # "nobody": no vote cast, no leader known


class MessageType(enum.IntEnum):
    VOTE = 1
    VOTE_RESP = 2
    PRE_VOTE = 3
    PRE_VOTE_RESP = 4
    APPEND = 5
    APPEND_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAPSHOT = 9
    TIMEOUT_NOW = 10


class EntryType(enum.IntEnum):
    NORMAL = 1  # application data; an empty NORMAL entry is a new leader's no-op
    CONF_CHANGE = 2  # a ConfChange, encoded by encode_conf_change


class Role(enum.IntEnum):
    FOLLOWER = 1
    PRE_CANDIDATE = 2
    CANDIDATE = 3
    LEADER = 4


class ConfChangeOp(enum.IntEnum):
    ADD = 1  # a voter (a learner's promotion when the peer is a learner)
    REMOVE = 2  # a voter or a learner
    ADD_LEARNER = 3  # a non-voter: replicated to, never counted for a quorum, never a candidate


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""

    def size_bytes(self) -> int:
        return len(self.data) + 24


@dataclass(frozen=True, slots=True)
class HardState:
    """What must survive a crash before a node acts on it: term, vote, commit."""

    term: int = 0
    vote: str = NO_PEER
    commit: int = 0


@dataclass(frozen=True, slots=True)
class ConfState:
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()  # replicated to, never counted (etcd's learners)

    def __post_init__(self) -> None:
        assert list(self.voters) == sorted(set(self.voters)), "voters are sorted and unique"
        assert list(self.learners) == sorted(set(self.learners)), "learners are sorted and unique"
        assert not set(self.voters) & set(self.learners), "a peer is a voter or a learner, not both"

    def members(self) -> tuple[str, ...]:
        return tuple(sorted(self.voters + self.learners))


@dataclass(frozen=True, slots=True)
class ConfChange:
    op: ConfChangeOp
    peer: str
    voters_after: tuple[str, ...] = ()  # filled in by the leader when it proposes the change
    learners_after: tuple[str, ...] = ()  # likewise


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    conf: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    data: bytes = b""

    def is_empty(self) -> bool:
        return self.meta.index == 0


@dataclass(frozen=True, slots=True)
class Message:
    """One RAFT message between peers of a group. Field meaning depends on `type` (as in etcd).

    APPEND: (log_term, index) names the entry before `entries`; `commit` is the leader's commit.
    APPEND_RESP: `index` is the last index the follower holds (success) or the rejected `index`,
    with `reject_hint`/`log_term` pointing where the leader should probe next.
    VOTE/PRE_VOTE: (log_term, index) is the candidate's last entry; context=b"transfer" forces it.
    APPEND_RESP/HEARTBEAT_RESP: context=b"degraded" when the follower's state machine lacks data it
    holds in its log (a store with a lost, damaged range awaiting repair): not current.
    """

    type: MessageType
    sender: str
    to: str
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""


TRANSFER_CONTEXT = b"transfer"
DEGRADED_CONTEXT = b"degraded"


@dataclass(frozen=True, slots=True)
class Bugs:
    """Planted bugs for proving the simulator finds them. Test-only; every flag is off by default."""

    ack_before_persist: bool = False  # driver: entries acked (sent) before they are durable
    vote_not_persisted: bool = False  # core: a vote never reaches the persisted hard state
    commit_previous_term: bool = False  # core: count replicas of an older-term entry to commit it
    no_term_check_on_append: bool = False  # core: accept APPEND from a leader of an older term
    snapshot_drops_entry: bool = False  # driver: snapshot labelled later than the state it holds
    no_log_matching_check: bool = False  # core: follower appends without checking prev (index, term)

    def names_on(self) -> list[str]:
        return [name for name in BUG_NAMES if getattr(self, name)]


BUG_NAMES = (
    "ack_before_persist",
    "vote_not_persisted",
    "commit_previous_term",
    "no_term_check_on_append",
    "snapshot_drops_entry",
    "no_log_matching_check",
)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Per-replica settings. Ticks are abstract: the driver maps them to its clock."""

    id: str
    election_ticks: int = limits.RAFT_ELECTION_TICKS
    heartbeat_ticks: int = limits.RAFT_HEARTBEAT_TICKS
    inflight_msgs_max: int = limits.RAFT_INFLIGHT_MSGS_MAX
    append_bytes_max: int = limits.RAFT_APPEND_BYTES_MAX
    uncommitted_entries_max: int = limits.RAFT_UNCOMMITTED_ENTRIES_MAX
    apply_bytes_max: int = limits.RAFT_APPLY_BYTES_MAX
    leader_gone_slot_ticks: int = limits.RAFT_LEADER_GONE_SLOT_TICKS
    pre_vote: bool = True
    check_quorum: bool = True
    bugs: Bugs = field(default_factory=Bugs)

    def __post_init__(self) -> None:
        assert self.id != NO_PEER
        assert self.heartbeat_ticks >= 1
        assert self.election_ticks > self.heartbeat_ticks
        assert self.inflight_msgs_max >= 1
        assert self.append_bytes_max >= 1
        assert self.leader_gone_slot_ticks >= 1


@dataclass(frozen=True, slots=True)
class Ready:
    """A batch of work for the driver, to be done in this order (see core.RaftCore):

    1. persist `snapshot`, `entries` and `hard_state` (fsync when `must_sync`);
    2. send `messages`;
    3. apply `committed` in order (after restoring `snapshot` if any);
    4. call advance(ready).
    """

    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    committed: tuple[Entry, ...]
    messages: tuple[Message, ...]
    must_sync: bool
