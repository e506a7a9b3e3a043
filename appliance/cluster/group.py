"""RaftGroup: drives one RaftCore. The only code that writes the Ready order:

    persist (fsync when the Ready says must_sync) -> send -> apply -> advance

(a leader's appends of new entries leave just before its persist: its followers fsync alongside
it; its other messages leave after the apply, so the answers to what just committed go first)

I/O sits behind four small seams, so the same driver runs in a worker's asyncio loop and in the
simulator: a LogStorage (memory or DurableStorage), a Transport (`send(messages)`), a StateMachine
(`apply(entries)`, `snapshot()`, `restore(data)`) and a Clock (ticks are derived from it).

Proposals are queued (bounded: RAFT_PROPOSALS_PENDING_MAX) and enter the core as one batch at the
start of the next Ready, so every proposal that arrived while a Ready was being persisted shares
one append and one fsync (group commit). When the queue or the leader's uncommitted log is full,
propose() raises LimitExceeded: that is the backpressure callers must honour.
A proposal is acknowledged (`on_done(True, index)`) only once its entry is applied here with the
term it was proposed in; it fails (`on_done(False, index)`) if another entry took its index, if
it was cut off a deposed leader's log, or if a snapshot replaced it. Nobody above this driver may
assume a proposal commits inside `propose`: with remote voters it commits when a quorum has
persisted it, many loop turns later. Callers answer from `on_done`.

Durability is decided here and only here. Every Ready whose entries or hard state must be durable
(`must_sync`) is fsynced before its messages leave and before it is applied, on leaders and
followers alike: a follower acknowledges an append only once it is on disk. The one relaxation is
a `durable=False` proposal of a group with a single voter (a consumer's delivered records): it is
written at once and fsynced within `lazy_sync_s` (or by the next Ready that must sync); losing it
in a crash only redelivers. Groups with more than one voter always sync: a quorum's promise is a
promise about disks. A single voter whose log lives in memory (an R1 stream: its segment store
is the durable copy, and nats-server keeps no RAFT log for R1 either) hands the driver an
AppliedSync: the driver acknowledges its proposals only once the applied state is synced, one
sync for every proposal applied meanwhile (group commit).

Membership: a new member joins as a learner (`add_learner`): it is sent appends and snapshots but
counts for no quorum, so a peer that must first fetch a snapshot's data costs the group nothing.
Whichever replica leads promotes a learner to voter once RaftCore.caught_up_learners names it
(within RAFT_LEARNER_LAG_MAX of the commit index, and past the last snapshot it was sent: it has
the snapshot's data); `add_voter` adds a voter at once (or promotes a learner now).

With a Scheduler attached (a worker's event loop) the group runs its own Ready loop: `propose`,
`step` and the membership calls schedule it for the next loop turn, and whatever else arrives
meanwhile joins the same Ready (group commit). Without one (the simulator, unit tests) the caller
calls `process_ready`.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from appliance import limits
from appliance.clock import Clock
from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.raft.core import RaftCore
from appliance.raft.storage import LogStorage
from appliance.raft.progress import ProgressState
from appliance.raft.types import (
    MessageType,
    ConfChange,
    ConfChangeOp,
    Entry,
    Message,
    RaftConfig,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
)

logger = logging.getLogger(__name__)
OnDone = Callable[[bool, int], None]  # (acknowledged, index); index 0 if none was assigned
TICKS_PER_CALL_MAX = 100  # a stalled loop catches up at most this many ticks at once
READIES_PER_TURN_MAX = 64  # a scheduled Ready loop yields to the event loop after this many
APPEND_TIMES_MAX = 1024  # appended batches whose time monitoring remembers (older: first_ts unknown)


class Timer(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """The event loop a group runs its Ready loop on (a worker's asyncio loop, or a test's)."""

    def call_soon(self, fn: Callable[[], None]) -> object: ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Timer: ...


class Transport(Protocol):
    def send(self, messages: Sequence[Message]) -> None:
        """Hand messages to their peers; never blocks. They are on their way (written to the
        sockets) when this returns, not at the loop's next turn: the driver may fsync next, and
        a leader's appends must reach the followers before it (§10.2.1), a follower's answer
        before it applies. A lost message is the core's problem."""
        ...


class StateMachine(Protocol):
    def apply(self, entries: Sequence[Entry]) -> None:
        """Apply committed entries in index order (includes no-op and membership entries)."""
        ...

    def applied_index(self) -> int:
        """The last index this state machine holds durably by itself (0 if it keeps nothing).

        After a restart the driver restores the raft snapshot only if it is newer, and re-applies
        committed entries from max(snapshot, applied_index) + 1 on (etcd's Config.Applied).
        """
        ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class AppliedSync(Protocol):
    """A state machine that keeps what it applies durable by itself (a stream's segment store).

    On a single voter whose RAFT log is not durable (a stream's in-memory log), the applied
    state is the only durable copy: the driver acknowledges a proposal only after
    `sync_applied` has made everything applied before it durable (group commit: one sync for
    every proposal applied meanwhile).
    """

    def sync_applied(self, *, urgent: bool, done: Callable[[bool], None]) -> None:
        """Make everything applied so far durable, then done(True) (on the loop; possibly before
        returning), or done(False) if it could not (a failed fsync: nothing it covered may be
        acknowledged). `urgent`: the group is closing; sync before returning."""
        ...


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """A follower as the leader sees it: nats' "Replica: n2, current, seen 0.07s ago"."""

    peer: str
    current: bool  # never while a learner: it is outdated until promoted
    seen_ago_s: float
    match: int
    learner: bool = False
    degraded: bool = False  # its state machine lacks data its log holds (a lost range awaiting repair)

    def describe(self) -> str:
        """As `nats stream info` prints a replica: 'n2, current, seen 0.07s ago'."""
        return f"{self.peer}, {'current' if self.current else 'outdated'}, seen {self.seen_ago_s:.2f}s ago"


@dataclass(frozen=True, slots=True)
class PeerReport:
    """Another voter as this replica knows it (/raftz `peers`): the leader tracks every follower's
    replicated index and contact; a follower only its leader's contact."""

    peer: str
    last_replicated_index: int = 0  # 0: not known here
    seen_ago_s: float | None = None  # None: never heard from (as far as this replica tracks)


@dataclass(frozen=True, slots=True)
class GroupReport:
    """One replica's RAFT state for monitoring (/raftz, /healthz, `appliance status`)."""

    group_id: str
    peer: str  # this replica's peer id
    role: str  # LEADER, FOLLOWER or CANDIDATE (a pre-candidate is a candidate), as nats-server spells it
    term: int
    voted_for: str
    leader: str  # peer id; "" when none is known
    ever_had_leader: bool
    leader_since_wall_s: float | None
    leader_seen_ago_s: float  # 0 on the leader
    committed: int
    applied: int
    first_index: int  # of the entries the log holds (after its snapshot)
    last_index: int
    last_term: int
    log_entries: int
    log_bytes: int
    first_append_wall_s: float | None  # when the log's first entry was appended here; None: unknown
    last_append_wall_s: float | None  # when this replica last appended an entry; None: not since start
    voters: tuple[str, ...]
    peers: tuple[PeerReport, ...]
    apply_paused: bool  # waiting for a snapshot's data (catching up)
    learners: tuple[str, ...] = ()


@dataclass(slots=True)
class _Proposal:
    term: int
    on_done: OnDone


class RaftGroup:
    def __init__(self, *, group_id: str, config: RaftConfig, storage: LogStorage, transport: Transport,
                 state_machine: StateMachine, clock: Clock, rng: random.Random,
                 tick_s: float = limits.RAFT_TICK_S, snapshot_entries: int = limits.RAFT_SNAPSHOT_ENTRIES,
                 proposals_pending_max: int = limits.RAFT_PROPOSALS_PENDING_MAX,
                 events: Callable[[str], None] | None = None, scheduler: Scheduler | None = None,
                 lazy_sync_s: float = limits.RAFT_LAZY_SYNC_S,
                 applied_sync: AppliedSync | None = None,
                 commit_notice_s: float = limits.RAFT_COMMIT_NOTICE_S,
                 learner_lag_max: int = limits.RAFT_LEARNER_LAG_MAX) -> None:
        assert tick_s > 0
        assert snapshot_entries >= 1
        self.group_id = group_id
        self.storage = storage
        self.transport = transport
        self.state_machine = state_machine
        self.clock = clock
        self.tick_s = tick_s
        self.snapshot_entries = snapshot_entries
        self.proposals_pending_max = proposals_pending_max
        self.bugs = config.bugs
        snapshot = storage.snapshot()
        applied = state_machine.applied_index()
        if not snapshot.is_empty() and snapshot.meta.index > applied:
            state_machine.restore(snapshot.data)
        self.core = RaftCore(config, storage, rng, events=events, applied=applied)
        self._pending: list[tuple[bytes, OnDone | None, bool]] = []
        self._on_caught_up: Callable[[], None] | None = None  # abstain(): run when it votes again
        self._waiting: dict[int, _Proposal] = {}
        self._unsynced = False
        self._origin_s = clock.monotonic()
        self._ticks_done = 0
        self.scheduler = scheduler
        self.lazy_sync_s = lazy_sync_s
        self._scheduled = False
        self._running = False  # the scheduled Ready loop is on the stack (run_now must not re-enter)
        self._lazy: set[int] = set()  # indexes of durable=False proposals not persisted yet
        self._dirty = False  # written but not fsynced (lazy entries of a single-voter group)
        self._lazy_timer: Timer | None = None
        self.commit_notice_s = commit_notice_s
        self.learner_lag_max = learner_lag_max
        self._notices: dict[str, Message] = {}  # peer -> a held commit notice (see _hold_notices)
        self._notice_timer: Timer | None = None
        self._closed = False
        self.applied_sync = applied_sync
        self.on_lead: Callable[[], None] | None = None  # runs once per term, when ready_to_lead()
        self._apply_paused = False
        self._held: tuple[Ready, bytes | None] | None = None  # a Ready waiting for resume_apply
        self._led_term = 0
        self._since_term = 0  # the term leader_since_wall_s belongs to
        self._since_wall_s = 0.0
        self._known_lead = ""
        self.leader_changes = 0  # times this replica learned of a new leader (monitoring: /metrics)
        self._last_append_wall_s: float | None = None  # monitoring: /raftz wal.last_ts
        # monitoring: (first index, wall time) of each batch appended since start (/raftz wal.first_ts)
        self._append_times: deque[tuple[int, float]] = deque(maxlen=APPEND_TIMES_MAX)
        self._applied_unsynced: list[tuple[OnDone, int]] = []  # acknowledged after the next sync
        self._applied_syncing = False
        self._applied_waiters: list[tuple[int, Callable[[], None]]] = []  # (index, fn): when_applied
        hard_state, _ = storage.initial_state()
        self._durable_term_vote = (hard_state.term, hard_state.vote)

    # --- inputs ------------------------------------------------------------------------------------
    def propose(self, data: bytes, on_done: OnDone | None = None, *, durable: bool = True) -> None:
        """Queue `data` for the next Ready; `on_done` runs once it is applied (or lost).

        Raises NotLeader or LimitExceeded (full). `durable=False` lets a single-voter group
        write the entry without an fsync of its own (see the module docstring).
        """
        core = self.core
        if core.role != Role.LEADER:
            raise NotLeader(f"{core.id} is not the leader of {self.group_id}", leader_hint=core.lead or None)
        if len(self._pending) >= self.proposals_pending_max:
            raise LimitExceeded(f"{self.group_id}: {len(self._pending)} proposals pending")
        uncommitted = core.log.last_index() - core.log.committed + len(self._pending)
        if uncommitted >= core.config.uncommitted_entries_max:
            raise LimitExceeded(f"{self.group_id}: {uncommitted} entries not committed yet")
        if not self._quorum_has_window():
            raise LimitExceeded(f"{self.group_id}: the in-flight window to a quorum of followers is full")
        self._pending.append((data, on_done, durable))
        self.kick()

    def _quorum_has_window(self) -> bool:
        """Can a new entry reach a quorum now, or are too many followers' in-flight windows full?"""
        core = self.core
        open_voters = sum(1 for peer in core.voters
                          if peer == core.id or (peer in core.progress and not core.progress[peer].inflights.full()))
        return open_voters >= len(core.voters) // 2 + 1

    def ready_to_lead(self) -> bool:
        """Leader, and every entry committed before its term is applied here (its own first
        entry is): only now may it decide from the state machine (a new consumer leader that
        delivered before applying its predecessor's acks would redeliver acknowledged messages)."""
        core = self.core
        return core.role == Role.LEADER and core.log.term(core.log.applied) == core.term

    def awaits(self, index: int) -> bool:
        """Is a proposal made here waiting for the entry at `index` (its on_done will run)?"""
        return index in self._waiting

    def step(self, message: Message) -> None:
        self.core.step(message)
        if message.sender in self.core.learners:
            self._promote_learners()
        self.kick()

    def applied(self) -> int:
        """The index of the last entry applied here."""
        return self.core.log.applied

    def when_applied(self, index: int, fn: Callable[[], None]) -> None:
        """Run `fn` once this replica has applied `index` (at once if it has): a proposal a
        leader committed for us (cluster/forward.py) is answered only when it is visible here."""
        if self.core.log.applied >= index:
            fn()
            return
        if len(self._applied_waiters) >= self.proposals_pending_max:
            raise LimitExceeded(f"{self.group_id}: {len(self._applied_waiters)} waiters for applied entries")
        self._applied_waiters.append((index, fn))

    def _run_applied_waiters(self) -> None:
        applied = self.core.log.applied
        due = [fn for index, fn in self._applied_waiters if index <= applied]
        if due:
            self._applied_waiters = [(i, fn) for i, fn in self._applied_waiters if i > applied]
            for fn in due:
                fn()

    # --- membership and leadership -----------------------------------------------------------------
    def add_voter(self, peer: str, on_done: OnDone | None = None) -> int:
        """Propose adding `peer` as a voter (or promoting it, a learner); returns the entry's
        index. Raises NotLeader, ProposalDropped."""
        return self._propose_conf_change(ConfChange(ConfChangeOp.ADD, peer), on_done)

    def add_learner(self, peer: str, on_done: OnDone | None = None) -> int:
        """Propose adding `peer` as a learner, promoted by the leader once caught up (module
        docstring); returns the entry's index. Raises NotLeader, ProposalDropped."""
        return self._propose_conf_change(ConfChange(ConfChangeOp.ADD_LEARNER, peer), on_done)

    def _promote_learners(self) -> None:
        """On the leader: promote one caught-up learner (one membership change at a time), or
        give a learner past its snapshot an entry to acknowledge when the log has none."""
        core = self.core
        if core.role != Role.LEADER or not core.learners or self._closed:
            return
        if core.pending_conf_index > core.log.applied:
            return  # one membership change at a time: looked at again once it is applied
        caught_up = core.caught_up_learners(self.learner_lag_max)
        try:
            if caught_up:
                self._propose_conf_change(ConfChange(ConfChangeOp.ADD, caught_up[0]), None)
                logger.info("RAFT group %s: learner %s caught up (match %d, commit %d): promoted to voter",
                            self.group_id, caught_up[0], core.progress[caught_up[0]].match, core.log.committed)
            elif not self._pending and core.awaits_entry_after_snapshot():
                self.propose(b"")  # (queued proposals would give it one anyway)
        except (NotLeader, ProposalDropped, LimitExceeded) as exc:
            logger.debug("RAFT group %s: learner promotion later: %s", self.group_id, exc)

    def learners(self) -> tuple[str, ...]:
        return self.core.learners

    def remove_voter(self, peer: str, on_done: OnDone | None = None) -> int:
        """Propose removing `peer`, a voter (possibly this leader itself) or a learner; returns the entry's index."""
        return self._propose_conf_change(ConfChange(ConfChangeOp.REMOVE, peer), on_done)

    def _propose_conf_change(self, change: ConfChange, on_done: OnDone | None) -> int:
        self._flush_proposals()  # queued proposals keep their order ahead of the change
        index = self.core.propose_conf_change(change)
        if on_done is not None:
            self._waiting[index] = _Proposal(self.core.term, on_done)
        self.kick()
        return index

    def transfer_leader(self, peer: str | None = None) -> str:
        """Hand leadership to `peer` (or the most up-to-date voter); returns the chosen peer.

        Raises NotLeader or ProposalDropped. Proposals still waiting fail when the leader steps down.
        """
        chosen = self.core.transfer_leadership(peer)
        self.kick()
        return chosen

    def voters(self) -> tuple[str, ...]:
        return self.core.voters

    def peer_gone(self, peer: str) -> None:
        """The connection to `peer`'s host closed: if it led this group, elect another now
        (RaftCore.peer_gone: within a few ticks, not a whole election timeout)."""
        self.core.peer_gone(peer)

    def abstain(self, caught_up: Callable[[], None] | None = None) -> None:
        """This replica lost its durable RAFT state: no votes, no campaigns until a leader has
        caught it up (RaftCore.abstain). `caught_up` runs once it has, after the entries that
        ended it are on disk."""
        self.core.abstain()
        self._on_caught_up = caught_up

    @property
    def abstaining(self) -> bool:
        return self.core.abstaining

    def _check_caught_up(self) -> None:
        if self._on_caught_up is not None and not self.core.abstaining:
            caught_up, self._on_caught_up = self._on_caught_up, None
            caught_up()

    def campaign(self) -> None:
        """Start an election now (a single-voter group elects itself within a few Readies)."""
        self.core.campaign()
        self.kick()

    # --- the scheduled Ready loop --------------------------------------------------------------------
    def kick(self) -> None:
        """Run the Ready loop on the next loop turn (no-op without a scheduler, or if already due)."""
        if self.scheduler is None or self._scheduled or self._closed:
            return
        self._scheduled = True
        self.scheduler.call_soon(self._run_scheduled)

    def _run_scheduled(self) -> None:
        self._scheduled = False
        if self._closed or self._running:
            return
        self._running = True
        try:
            for _ in range(READIES_PER_TURN_MAX):
                if not self.process_ready():
                    return
        finally:
            self._running = False
        self.kick()  # more is ready: the rest of the loop runs first

    def run_now(self) -> None:
        """Run the Ready loop now rather than on the next loop turn: for a caller that batched
        this turn's proposals itself (a stream's publishes of one turn) and calls from the loop,
        not from inside this group's Ready (there it only schedules, as `kick`). Saves a sync
        publisher one loop turn between its proposal and the fsync."""
        if self.scheduler is None or self._closed:
            return
        if self._running:
            self.kick()
            return
        self._run_scheduled()

    def close(self) -> None:
        """Stop the Ready loop: run what is ready (a single voter commits its last proposals),
        fsync what lazy writes hold, and fail the proposals still waiting."""
        if self._closed:
            return
        for _ in range(READIES_PER_TURN_MAX):  # what a single voter can still commit, it commits
            if not self.process_ready():
                break
        self._closed = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        self._send_notices()  # the followers learn the last commit now
        if self._notice_timer is not None:
            self._notice_timer.cancel()
            self._notice_timer = None
        self._sync_dirty()
        self._maybe_sync_applied(urgent=True)  # (one in flight answers when it completes)
        waiting, self._waiting = self._waiting, {}
        for index, proposal in sorted(waiting.items()):
            proposal.on_done(False, index)
        pending, self._pending = self._pending, []
        for _, on_done, _ in pending:
            if on_done is not None:
                on_done(False, 0)

    def tick(self) -> int:
        """Tick the core once for every tick_s of clock time that passed; returns the ticks done."""
        due = int((self.clock.monotonic() - self._origin_s) / self.tick_s + 1e-9)
        ticks = min(due - self._ticks_done, TICKS_PER_CALL_MAX)
        for _ in range(ticks):
            self.core.tick()
        self._ticks_done = due  # far behind: the ticks beyond the cap are skipped, not stormed
        return max(ticks, 0)

    # --- the Ready loop ------------------------------------------------------------------------------
    def process_ready(self) -> bool:
        """Run one Ready through persist -> send -> apply -> advance; False if there was nothing."""
        if self._apply_paused:
            return False  # a snapshot's data is being fetched (pause_apply)
        self._flush_proposals()
        if not self.core.has_ready():
            return False
        if self._unsynced:
            self.storage.sync()  # planted bug ack_before_persist: the fsync comes one Ready late
            self._unsynced = False
        ready = self.core.ready()
        messages = ready.messages
        after_apply: Sequence[Message] = ()
        if self.core.role == Role.LEADER and messages:
            # A leader's appends of new entries leave before its own fsync, so the followers'
            # fsyncs run alongside it (Raft thesis §10.2.1): the leader counts itself toward a
            # commit only through this Ready, and the persist below ends before any follower's
            # answer is stepped. Everything else it sends (commit notices, heartbeats) waits until
            # this Ready's committed entries are applied: the answers to those proposals go first
            # (a synchronous publisher waits for its PubAck, not for the followers' commit index).
            if ready.entries:
                early = [m for m in messages if m.type == MessageType.APPEND]
                self._send(early)
                after_apply = [m for m in messages if m.type != MessageType.APPEND]
            else:
                after_apply = self._hold_notices(messages)
            messages = []
        self._persist(ready)
        self._send(messages)  # a follower's answers: its entries are on disk now
        stale_snapshot = self._stale_snapshot_for_bug(ready)
        if ready.snapshot is not None:
            self.state_machine.restore(ready.snapshot.data)
            self._fail_waiting_through(ready.snapshot.meta.index)
            if self._apply_paused:  # the machine fetches what the snapshot stands for
                self._held = (ready, stale_snapshot)
                self._send(after_apply)
                return True
        self._finish(ready, stale_snapshot)
        self._send(after_apply)
        self._check_caught_up()  # after the apply: what this Ready applied was applied abstaining
        return True

    # --- sending (commit notices held for the next append) -------------------------------------------
    def _send(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        if self._notices:
            for message in messages:
                if message.type == MessageType.APPEND:  # it carries the commit index too
                    self._notices.pop(message.to, None)
        self.transport.send(messages)

    def _hold_notices(self, messages: Sequence[Message]) -> Sequence[Message]:
        """A leader's Ready without new entries: hold its appends that tell a replicating
        follower nothing but the new commit index (no entries: the follower holds them or they
        are on their way), for up to commit_notice_s, and return the rest to send.
        The next append to that follower (the next publish of a synchronous publisher) carries
        the commit index instead; the timer sends what is still held. A follower learns a commit
        up to commit_notice_s later (never a message later); nothing waits for it: a leader's
        answers go out at its own commit. Saves each follower a wake-up, a Ready and a write per
        commit, and the leader two route writes."""
        core = self.core
        if self.scheduler is None or self.commit_notice_s <= 0:
            return messages
        rest: list[Message] = []
        for message in messages:
            progress = core.progress.get(message.to)
            if (message.type == MessageType.APPEND and not message.entries and progress is not None
                    and progress.state == ProgressState.REPLICATE):
                self._notices[message.to] = message
            else:
                rest.append(message)
        if self._notices and self._notice_timer is None:
            self._notice_timer = self.scheduler.call_later(self.commit_notice_s, self._on_notice_timer)
        return rest

    def _on_notice_timer(self) -> None:
        self._notice_timer = None
        if not self._closed:
            self._send_notices()

    def _send_notices(self) -> None:
        notices, self._notices = self._notices, {}
        core = self.core
        current = [m for m in notices.values() if core.role == Role.LEADER and m.term == core.term]
        if current:
            self.transport.send(current)

    def pause_apply(self) -> None:
        """Called by the state machine from `restore` when it must fetch data first (a stream
        replica catching up from the leader's store), or right after the group is built when the
        restore ran in its constructor (a replica restarted behind its snapshot): the rest of this
        Ready (committed entries, advance) and every later Ready wait until `resume_apply`. Messages still arrive (stepped
        into the core); nothing more is persisted, acknowledged or applied meanwhile."""
        self._apply_paused = True

    def resume_apply(self) -> None:
        """The state machine holds what the installed snapshot stands for: go on."""
        assert self._apply_paused
        self._apply_paused = False
        held, self._held = self._held, None
        if held is not None:
            self._finish(*held)
        self.kick()

    def _finish(self, ready: Ready, stale_snapshot: bytes | None) -> None:
        self._apply_committed(ready)
        self.core.advance(ready)
        if self._applied_waiters:
            self._run_applied_waiters()
        if self.core.lead and self.core.lead != self._known_lead:
            self._known_lead = self.core.lead
            self.leader_changes += 1
        if self._since_term != self.core.term and self.ready_to_lead():
            self._since_term, self._since_wall_s = self.core.term, self.clock.wall()
        if self.on_lead is not None and self._led_term != self.core.term and self.ready_to_lead():
            self._led_term = self.core.term
            self.on_lead()
        if self.core.learners:
            self._promote_learners()
        self._maybe_compact(stale_snapshot)
        if not self.is_leader():
            self._lazy.clear()
            if self._waiting:
                self._fail_lost_proposals()

    def _fail_lost_proposals(self) -> None:
        """Fail proposals whose entry can no longer commit: overwritten, or cut off a deposed leader's log."""
        log = self.core.log
        for index in list(self._waiting):
            term = log.term(index)
            proposal = self._waiting[index]
            gone = term is None and index > log.last_index() and self.core.term != proposal.term
            if gone or (term is not None and term != proposal.term):
                del self._waiting[index]
                proposal.on_done(False, index)

    def _persist(self, ready: Ready) -> None:
        if ready.snapshot is not None:
            self.storage.apply_snapshot(ready.snapshot)
        if ready.entries or ready.hard_state is not None:
            sync = ready.must_sync
            if sync and not self._must_be_durable(ready):
                sync = False
                self._dirty = True
                self._arm_lazy_sync()
            if sync and self.bugs.ack_before_persist:
                sync, self._unsynced = False, True
            self.storage.save(ready.hard_state, ready.entries, sync=sync)
            if ready.entries:
                self._note_append(ready.entries[0].index)
            if sync:
                self._dirty = False
            if ready.hard_state is not None and sync:
                self._durable_term_vote = (ready.hard_state.term, ready.hard_state.vote)

    def _must_be_durable(self, ready: Ready) -> bool:
        """Only lazy entries of a single voter with a scheduler, and no new term or vote, may
        skip the fsync (a follower, or any voter of a multi-voter group, never does)."""
        lazy = self._lazy
        if not lazy:
            return True
        all_lazy = all(entry.index in lazy for entry in ready.entries)
        for entry in ready.entries:
            lazy.discard(entry.index)
        if self.scheduler is None or len(self.core.voters) > 1 or not all_lazy:
            return True
        state = ready.hard_state
        return state is not None and (state.term, state.vote) != self._durable_term_vote

    def _arm_lazy_sync(self) -> None:
        assert self.scheduler is not None
        if self._lazy_timer is None:
            self._lazy_timer = self.scheduler.call_later(self.lazy_sync_s, self._on_lazy_timer)

    def _on_lazy_timer(self) -> None:
        self._lazy_timer = None
        self._sync_dirty()

    def _sync_dirty(self) -> None:
        if self._dirty:
            self.storage.sync()
            self._dirty = False

    def _apply_committed(self, ready: Ready) -> None:
        if not ready.committed:
            return
        self.state_machine.apply(ready.committed)
        hold = self.applied_sync is not None and len(self.core.voters) == 1
        for entry in ready.committed:
            proposal = self._waiting.pop(entry.index, None)
            if proposal is None:
                continue
            if hold and proposal.term == entry.term:
                self._applied_unsynced.append((proposal.on_done, entry.index))
            else:
                proposal.on_done(proposal.term == entry.term, entry.index)
        if self._applied_unsynced:
            self._maybe_sync_applied(urgent=False)

    def _maybe_sync_applied(self, *, urgent: bool) -> None:
        """One sync of the applied state at a time; what is applied during it waits for the next."""
        if self._applied_syncing or not self._applied_unsynced:
            return
        assert self.applied_sync is not None
        batch, self._applied_unsynced = self._applied_unsynced, []
        self._applied_syncing = True

        def synced(ok: bool) -> None:
            self._applied_syncing = False
            for on_done, index in batch:
                on_done(ok, index)
            self._maybe_sync_applied(urgent=self._closed)

        self.applied_sync.sync_applied(urgent=urgent, done=synced)

    def _flush_proposals(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        try:
            indexes = self.core.propose_many([data for data, _, _ in batch])
        except (NotLeader, ProposalDropped, LimitExceeded):
            for _, on_done, _ in batch:
                if on_done is not None:
                    on_done(False, 0)
            return
        term = self.core.term
        for index, (_, on_done, durable) in zip(indexes, batch, strict=True):
            if on_done is not None:
                self._waiting[index] = _Proposal(term, on_done)
            if not durable:
                self._lazy.add(index)

    def _fail_waiting_through(self, index: int) -> None:
        for waiting_index in [i for i in self._waiting if i <= index]:
            self._waiting.pop(waiting_index).on_done(False, waiting_index)

    # --- snapshots -----------------------------------------------------------------------------------
    def _snapshot_due(self, applied: int) -> bool:
        return applied - self.storage.snapshot().meta.index >= self.snapshot_entries

    def _stale_snapshot_for_bug(self, ready: Ready) -> bytes | None:
        if self.bugs.snapshot_drops_entry and ready.committed and self._snapshot_due(ready.committed[-1].index):
            return self.state_machine.snapshot()  # taken before this batch is applied: the bug
        return None

    def _maybe_compact(self, stale_snapshot: bytes | None) -> None:
        applied = self.core.log.applied
        if not self._snapshot_due(applied):
            return
        data = stale_snapshot if stale_snapshot is not None else self.state_machine.snapshot()
        meta = SnapshotMeta(applied, self.storage.term(applied), self.core.conf_state())
        self.storage.compact(Snapshot(meta, data))

    # --- monitoring ----------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.core.role == Role.LEADER

    def leader(self) -> str:
        return self.core.lead

    def replica_lags(self) -> dict[str, int]:
        """Entries each follower's log is behind this leader's (empty on followers and single voters)."""
        status = self.core.status()
        return {peer.peer: max(status.last_index - peer.match, 0) for peer in status.peers if peer.peer != status.id}

    def leader_since_wall_s(self) -> float | None:
        """Wall time this replica became a leader ready to lead (nats' leader_since); None unless it leads."""
        core = self.core
        return self._since_wall_s if core.role == Role.LEADER and self._since_term == core.term else None

    def leader_seen_ago_s(self) -> float:
        """On a follower: seconds since it last heard from its leader (0 on the leader)."""
        return 0.0 if self.is_leader() else self.core.election_elapsed * self.tick_s

    def commit_index(self) -> int:
        return self.core.log.committed

    def role_name(self) -> str:
        """leader, follower or candidate (a pre-candidate counts as a candidate), as /metrics labels it."""
        role = self.core.role
        return "leader" if role == Role.LEADER else "follower" if role == Role.FOLLOWER else "candidate"

    def set_degraded(self, degraded: bool) -> None:
        """This replica's state machine lacks data its log holds (a store with a lost range
        awaiting repair), or no longer does: its responses say so, and its leader reports it
        not current meanwhile."""
        self.core.degraded = degraded

    def peers(self) -> list[PeerInfo]:
        """Followers as seen by this leader (empty on followers)."""
        status = self.core.status()
        election_ticks = self.core.config.election_ticks
        learners = status.learners
        return [
            PeerInfo(peer.peer, peer.peer not in learners and peer.match >= status.commit
                     and peer.ticks_since_contact < election_ticks and not peer.degraded,
                     peer.ticks_since_contact * self.tick_s, peer.match, peer.peer in learners,
                     peer.degraded)
            for peer in status.peers
        ]

    def _note_append(self, first: int) -> None:
        now = self.clock.wall()
        self._last_append_wall_s = now
        times = self._append_times
        while times and times[-1][0] >= first:  # a follower's log overwritten from `first` on
            times.pop()
        times.append((first, now))

    def _first_append_wall_s(self, first_index: int) -> float | None:
        """When the batch holding the log's first entry was appended here (None: before start, or forgotten)."""
        times = self._append_times
        while len(times) > 1 and times[1][0] <= first_index:
            times.popleft()
        return times[0][1] if times and times[0][0] <= first_index else None

    def report(self, *, log_bytes: bool = True) -> GroupReport:
        """This replica's RAFT state, for monitoring (see GroupReport). `log_bytes`: also sum the
        sizes of the entries the log holds (reads them all: /raftz asks, health checks do not)."""
        core = self.core
        status = core.status()
        role = core.role
        name = "LEADER" if role == Role.LEADER else "FOLLOWER" if role == Role.FOLLOWER else "CANDIDATE"
        first, last = self.storage.first_index(), self.storage.last_index()
        entries = self.storage.entries(first, last + 1, 1 << 62) if last >= first and log_bytes else []
        seen_leader = self.leader_seen_ago_s()
        if role == Role.LEADER:
            peers = tuple(PeerReport(p.peer, p.match, p.ticks_since_contact * self.tick_s) for p in status.peers)
        else:
            peers = tuple(PeerReport(v, 0, seen_leader if v == core.lead else None)
                          for v in core.voters + core.learners if v != core.id)
        return GroupReport(
            group_id=self.group_id, peer=core.id, role=name, term=core.term, voted_for=core.vote,
            leader=core.lead, ever_had_leader=bool(self._known_lead or core.lead),
            leader_since_wall_s=self.leader_since_wall_s(), leader_seen_ago_s=seen_leader,
            committed=status.commit, applied=status.applied, first_index=first, last_index=last,
            last_term=core.log.last_term(), log_entries=max(last - first + 1, 0),
            log_bytes=sum(len(e.data) for e in entries),
            first_append_wall_s=self._first_append_wall_s(first) if last >= first else None,
            last_append_wall_s=self._last_append_wall_s, voters=core.voters, peers=peers,
            apply_paused=self._apply_paused, learners=core.learners,
        )
