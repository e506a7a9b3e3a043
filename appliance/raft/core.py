"""RaftCore: one RAFT replica as a pure state machine (etcd-io/raft's RawNode shape).

Inputs: tick(), step(message), propose(data), propose_conf_change(change), transfer_leadership(),
peer_gone(peer).
Output: ready() -> Ready. No I/O, no clock, no global randomness: the RNG is injected.

Ready contract (the driver, cluster/group.py, is the only code that writes this order):
  1. persist ready.snapshot, ready.entries, ready.hard_state (fsync when ready.must_sync);
  2. send ready.messages;
  3. apply ready.committed in order (after restoring ready.snapshot);
  4. call advance(ready).

Theory of operation
- Roles change only in _become_follower/_become_pre_candidate/_become_candidate/_become_leader.
- Pre-vote: a follower whose election timer fires first asks for votes at term+1 without raising
  its own term; only a pre-vote majority starts a real election, so a node rejoining after a
  partition cannot force a healthy leader out by its inflated term.
- Check-quorum: a leader that has not heard from a majority within an election timeout steps
  down; a follower that heard from a leader within the timeout ignores vote requests (lease).
- Fast failover: the driver calls peer_gone(peer) when it sees the connection to `peer`'s host
  close (a killed process's sockets close at once). A follower whose leader that is forgets it
  (so it no longer defends the leader's lease) and campaigns after a short delay instead of a
  whole election timeout. The survivors take turns (slot = rank among the surviving voters,
  rotated by term, RAFT_LEADER_GONE_SLOT_TICKS apart) so they do not split the vote. It is only a
  hint, and only taken with pre-vote on: the pre-vote still needs a majority, and voters that
  still hear from a live leader ignore it (lease), so a connection that merely flapped raises no
  term and deposes nobody.
- Membership changes are single-server and take effect when applied (advance), with at most one
  unapplied change at a time (etcd's pending_conf_index rule).
- Learners (etcd's): members that are replicated to (appends, snapshots, heartbeats) but are no
  voters: the commit index, check-quorum, elections and leader transfer count voters only, and a
  learner never campaigns. A new member joins as a learner (ADD_LEARNER) and is promoted (ADD)
  once caught_up_learners() names it, so adding a peer that must first fetch a snapshot never
  costs the group its quorum. A learner may still grant a vote, as in etcd: one promoted whose
  promotion it has not applied yet is a voter to the candidates that have, and refusing them
  could leave the group with no electable leader; a candidate counts only its own voters' votes.
- A restart resumes the membership of the applied index: the snapshot's, then every change in
  the log up to `applied` (those entries are not applied again, so their changes are read here).
- Proposals between two Readies are appended to the log and broadcast once, at ready() time:
  that is the batching. Followers in REPLICATE state get pipelined appends, at most
  config.inflight_msgs_max unacknowledged.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Sequence
from typing import assert_never

from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.raft import quorum
from appliance.raft.confchange import apply_to, decode_conf_change, encode_conf_change
from appliance.raft.log import RaftLog
from appliance.raft.progress import Progress, ProgressState
from appliance.raft.status import PeerStatus, Status
from appliance.raft.storage import LogStorage
from appliance.raft.types import (
    DEGRADED_CONTEXT,
    NO_PEER,
    TRANSFER_CONTEXT,
    ConfChange,
    ConfChangeOp,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    RaftConfig,
    Ready,
    Role,
    Snapshot,
)

logger = logging.getLogger(__name__)
MT = MessageType


class RaftCore:
    def __init__(self, config: RaftConfig, storage: LogStorage, rng: random.Random, *,
                 events: Callable[[str], None] | None = None, applied: int = 0) -> None:
        """`applied`: the index a durable state machine already holds; entries up to it are not re-applied."""
        self.id = config.id
        self.config = config
        self.bugs = config.bugs
        self.rng = rng
        self.log = RaftLog(storage, applied=applied)
        self._events = events
        hard_state, conf = storage.initial_state()
        self.term = hard_state.term
        self.vote = hard_state.vote
        conf = self._conf_at_applied(conf)
        self.voters: tuple[str, ...] = conf.voters
        self.learners: tuple[str, ...] = conf.learners
        self.lead = NO_PEER
        self.role = Role.FOLLOWER
        self.progress: dict[str, Progress] = {}
        self.votes: dict[str, bool] = {}
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_ticks = config.election_ticks
        self.fast_election = False  # the election timer is a peer_gone slot, not a timeout
        self.lead_transferee = NO_PEER
        self.degraded = False  # set by the owner: the state machine lacks data its log holds (its
        # responses say so: the leader reports this follower not current until it is whole again)
        self.pending_conf_index = 0
        self.tick_count = 0
        self.messages: list[Message] = []
        self._needs_broadcast = False
        self._persisted = self._hard_state_for_disk()
        self._ready_out = False
        # abstain(): this voter lost its durable state and takes no part in elections until a
        # leader has brought it up to the last index that leader held when first heard
        self.abstaining = False
        self._abstain_target: tuple[int, int] | None = None  # (term, that leader's last index); None: not heard
        self._leader_match = (0, 0)  # (term, index): our log equals that term's leader's up to index
        self._become_follower(self.term, NO_PEER)

    # --- public API ----------------------------------------------------------------------------
    def tick(self) -> None:
        self.tick_count += 1
        match self.role:
            case Role.LEADER:
                self._tick_heartbeat()
            case Role.FOLLOWER | Role.PRE_CANDIDATE | Role.CANDIDATE:
                self._tick_election()
            case _:
                assert_never(self.role)

    def campaign(self) -> None:
        """Start an election now (as if the election timer fired)."""
        self._hup(transfer=False)

    def propose(self, data: bytes) -> int:
        """Append `data` to the leader's log; returns its index. Raises NotLeader/ProposalDropped/LimitExceeded."""
        return self.propose_many([data])[0]

    def propose_many(self, batch: Sequence[bytes]) -> list[int]:
        self._check_can_propose(len(batch))
        first = self.log.last_index() + 1
        self._append_entries([Entry(self.term, first + i, EntryType.NORMAL, data) for i, data in enumerate(batch)])
        return list(range(first, first + len(batch)))

    def propose_conf_change(self, change: ConfChange) -> int:
        """ADD_LEARNER a new member, ADD a voter (promoting a learner), REMOVE either."""
        self._check_can_propose(1)
        if self.pending_conf_index > self.log.applied:
            raise ProposalDropped("a membership change is still being applied")
        if change.op == ConfChangeOp.ADD and change.peer in self.voters:
            raise ProposalDropped(f"{change.peer} is already a voter")
        if change.op == ConfChangeOp.ADD_LEARNER and change.peer in self.voters + self.learners:
            raise ProposalDropped(f"{change.peer} is already a member")
        if change.op == ConfChangeOp.REMOVE and change.peer not in self.voters + self.learners:
            raise ProposalDropped(f"{change.peer} is not a member")
        if change.op == ConfChangeOp.REMOVE and self.voters == (change.peer,):
            raise ProposalDropped("cannot remove the last voter")
        index = self.log.last_index() + 1
        after = apply_to(self.conf_state(), change.op, change.peer)
        change = ConfChange(change.op, change.peer, after.voters, after.learners)
        self._append_entries([Entry(self.term, index, EntryType.CONF_CHANGE, encode_conf_change(change))])
        self.pending_conf_index = index
        return index

    def transfer_leadership(self, target: str | None = None) -> str:
        """Hand leadership to `target`, or to the most up-to-date voter; returns the chosen peer."""
        if self.role != Role.LEADER:
            raise NotLeader("only the leader transfers leadership", leader_hint=self.lead or None)
        if target is None:
            target = self._most_up_to_date_peer()
            if target == NO_PEER:
                raise ProposalDropped("no other voter to transfer leadership to")
        if target == self.id:
            return target
        if target not in self.voters:
            raise ProposalDropped(f"{target} is not a voter")
        self.lead_transferee = target
        self.election_elapsed = 0
        self._note(f"{self.id} [term {self.term}] starts to transfer leadership to {target}")
        progress = self.progress[target]
        if progress.match == self.log.last_index():
            self._send(Message(MT.TIMEOUT_NOW, self.id, target, term=self.term))
        else:
            progress.become_probe()  # resend from its match now: earlier appends may be lost
            self._send_append(target)
        return target

    def abstain(self) -> None:
        """This voter's durable RAFT state was lost (a wiped or replaced disk, a deleted group
        directory): the entries it acknowledged and the vote it cast are forgotten. Voting with the
        empty log would let a candidate that lacks committed entries win (they were committed
        with this voter's lost acknowledgement), and voting twice in a term could elect two
        leaders. So it grants no vote and never campaigns until a leader has sent it every entry
        up to the last index that leader held when first heard (leader completeness: every
        committed entry is among them). Raft assumes stable storage; this is how we survive its
        loss. It still acknowledges what it stores, which is safe to count for commit."""
        self.abstaining = True
        self._abstain_target = None
        self._leader_match = (0, 0)
        self._note(f"{self.id} [term {self.term}] lost its state: abstains from elections until caught up")

    def peer_gone(self, peer: str) -> None:
        """The connection to `peer`'s host closed. If it is our leader, forget it and campaign in
        a few ticks (our slot among the surviving voters) instead of a whole election timeout."""
        if not self.config.pre_vote or self.role != Role.FOLLOWER or self.lead != peer or peer == self.id:
            return  # without pre-vote an early campaign of a node whose link merely flapped would
            # raise the term and depose a live leader: only a timeout may start that election
        survivors = [voter for voter in self.voters if voter != peer]
        self.lead = NO_PEER
        self.election_elapsed = 0
        if self.id not in survivors:
            return  # not a voter: it cannot campaign, only stop naming a dead leader
        rank = (survivors.index(self.id) + self.term) % len(survivors)
        self.randomized_election_ticks = 1 + rank * self.config.leader_gone_slot_ticks
        self.fast_election = True
        self._note(f"{self.id} [term {self.term}] lost leader {peer}: campaigns in "
                   f"{self.randomized_election_ticks} ticks")

    def report_unreachable(self, peer: str) -> None:
        progress = self.progress.get(peer)
        if self.role == Role.LEADER and progress is not None and progress.state == ProgressState.REPLICATE:
            progress.become_probe()

    def step(self, m: Message) -> None:
        assert m.to == self.id, f"{m.to} is not {self.id}"
        if m.term > self.term:
            if not self._accept_higher_term(m):
                return
        elif m.term < self.term:
            self._step_lower_term(m)
            return
        if m.type in (MT.VOTE, MT.PRE_VOTE):
            self._handle_vote_request(m)
            return
        match self.role:
            case Role.LEADER:
                self._step_leader(m)
            case Role.PRE_CANDIDATE | Role.CANDIDATE:
                self._step_candidate(m)
            case Role.FOLLOWER:
                self._step_follower(m)
            case _:
                assert_never(self.role)

    def has_ready(self) -> bool:
        return bool(
            self.messages or self._needs_broadcast or self.log.unstable_entries
            or self.log.unstable_snapshot is not None or self._hard_state_for_disk() != self._persisted
            or self.log.committed > self.log.applied
        )

    def ready(self) -> Ready:
        assert not self._ready_out, "advance() the previous Ready first"
        if self._needs_broadcast:
            self._needs_broadcast = False
            self._broadcast_append()
        hard_state = self._hard_state_for_disk()
        entries = tuple(self.log.unstable_entries)
        changed = hard_state != self._persisted
        must_sync = bool(entries) or (changed and (hard_state.term, hard_state.vote)
                                      != (self._persisted.term, self._persisted.vote))
        ready = Ready(
            hard_state=hard_state if changed else None,
            entries=entries,
            snapshot=self.log.unstable_snapshot,
            committed=tuple(self.log.next_committed(self.config.apply_bytes_max)),
            messages=tuple(self.messages),
            must_sync=must_sync or self.log.unstable_snapshot is not None,
        )
        self.messages = []
        self._ready_out = True
        return ready

    def advance(self, ready: Ready) -> None:
        assert self._ready_out
        self._ready_out = False
        if ready.hard_state is not None:
            self._persisted = ready.hard_state
        if ready.snapshot is not None:
            self.log.stable_snapshot_to(ready.snapshot.meta.index)
            self.log.applied = max(self.log.applied, ready.snapshot.meta.index)
        if ready.entries:
            last = ready.entries[-1]
            self.log.stable_to(index=last.index, term=last.term)
        for entry in ready.committed:
            if entry.index <= self.log.applied:
                continue
            self.log.applied_to(entry.index)
            if entry.type == EntryType.CONF_CHANGE:
                self._apply_conf_change(decode_conf_change(entry.data))

    def conf_state(self) -> ConfState:
        """The membership as of the applied index (what a snapshot taken now must record)."""
        return ConfState(self.voters, self.learners)

    def caught_up_learners(self, max_lag: int) -> list[str]:
        """On the leader: the learners ready to be promoted. A learner is caught up when it is
        replicating (not probed, not waiting for a snapshot), was heard from within an election
        timeout, holds entries up to within `max_lag` of the commit index, and acknowledged an
        entry after the last snapshot it was sent: a replica applies (and answers) nothing while
        it fetches what a snapshot stands for (RaftGroup.pause_apply), so that acknowledgement
        says it has the snapshot's data, not only its label."""
        if self.role != Role.LEADER:
            return []
        out = []
        for peer in self.learners:
            progress = self.progress.get(peer)
            if (progress is not None and progress.state == ProgressState.REPLICATE
                    and progress.match > progress.snapshot_sent
                    and self.log.committed - progress.match <= max_lag
                    and self.tick_count - progress.last_contact_tick < self.config.election_ticks):
                out.append(peer)
        return out

    def awaits_entry_after_snapshot(self) -> bool:
        """On the leader: does a learner hold everything but still owe an acknowledgement of an
        entry after its snapshot (caught_up_learners), with no entry after it to acknowledge?
        The driver then proposes an empty entry (an idle group's learner is promoted too)."""
        if self.role != Role.LEADER:
            return False
        last = self.log.last_index()
        for peer in self.learners:
            progress = self.progress.get(peer)
            if progress is not None and progress.snapshot_sent and progress.match == progress.snapshot_sent == last:
                return True
        return False

    def status(self) -> Status:
        peers: tuple[PeerStatus, ...] = ()
        if self.role == Role.LEADER:
            peers = tuple(
                PeerStatus(peer, pr.match, pr.next, pr.state, pr.inflights.count(),
                           self.tick_count - pr.last_contact_tick, pr.degraded)
                for peer, pr in sorted(self.progress.items()) if peer != self.id
            )
        return Status(self.id, self.role, self.term, self.lead, self.log.committed, self.log.applied,
                      self.log.last_index(), self.voters, peers, self.learners)

    # --- persistence view ----------------------------------------------------------------------
    def _hard_state_for_disk(self) -> HardState:
        vote = NO_PEER if self.bugs.vote_not_persisted else self.vote
        return HardState(self.term, vote, self.log.committed)

    # --- terms ---------------------------------------------------------------------------------
    def _accept_higher_term(self, m: Message) -> bool:
        if m.type in (MT.VOTE, MT.PRE_VOTE):
            in_lease = (self.config.check_quorum and self.lead != NO_PEER
                        and self.election_elapsed < self.config.election_ticks)
            if in_lease and m.context != TRANSFER_CONTEXT:
                self._note(f"{self.id} [term {self.term}] ignores {m.type.name} from {m.sender} "
                           f"[term {m.term}]: lease not expired")
                return False
        if m.type == MT.PRE_VOTE or (m.type == MT.PRE_VOTE_RESP and not m.reject):
            return True  # a pre-vote never changes our term
        lead = m.sender if m.type in (MT.APPEND, MT.HEARTBEAT, MT.SNAPSHOT) else NO_PEER
        self._note(f"{self.id} [term {self.term}] received {m.type.name} with higher term {m.term} from {m.sender}")
        self._become_follower(m.term, lead)
        return True

    def _step_lower_term(self, m: Message) -> None:
        if self.bugs.no_term_check_on_append and m.type == MT.APPEND and self.role != Role.LEADER:
            self._handle_append(m)
            return
        if m.type in (MT.APPEND, MT.HEARTBEAT) and (self.config.check_quorum or self.config.pre_vote):
            # Tell a stale leader about our term so that it steps down.
            self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term))
        elif m.type == MT.PRE_VOTE:
            self._send(Message(MT.PRE_VOTE_RESP, self.id, m.sender, term=self.term, reject=True))

    # --- roles ---------------------------------------------------------------------------------
    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = NO_PEER
        self.lead = NO_PEER
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._randomize_election_timeout()
        self.lead_transferee = NO_PEER
        self.votes = {}
        self.progress = {}
        self._needs_broadcast = False

    def _randomize_election_timeout(self) -> None:
        self.fast_election = False
        base = self.config.election_ticks
        self.randomized_election_ticks = base + self.rng.randrange(base)

    def _become_follower(self, term: int, lead: str) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead
        self._note(f"{self.id} became follower at term {self.term}")

    def _become_pre_candidate(self) -> None:
        assert self.role != Role.LEADER
        self.role = Role.PRE_CANDIDATE
        self.votes = {}
        self.lead = NO_PEER
        self._note(f"{self.id} became pre-candidate at term {self.term}")

    def _become_candidate(self) -> None:
        assert self.role != Role.LEADER
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE
        self._note(f"{self.id} became candidate at term {self.term}")

    def _become_leader(self) -> None:
        assert self.role == Role.CANDIDATE
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        last = self.log.last_index()
        for peer in self.voters + self.learners:
            self.progress[peer] = self._new_progress(last + 1)
        self.progress[self.id].match = last
        self.progress[self.id].become_replicate()
        self.pending_conf_index = last
        self._note(f"{self.id} became leader at term {self.term}")
        self._append_entries([Entry(self.term, last + 1)])

    def _new_progress(self, next_index: int) -> Progress:
        progress = Progress(next_index=next_index, inflight_max=self.config.inflight_msgs_max, now_tick=self.tick_count)
        progress.recent_active = True
        return progress

    def _promotable(self) -> bool:
        return self.id in self.voters and not self.abstaining

    # --- ticks ---------------------------------------------------------------------------------
    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self._promotable() and self.election_elapsed >= self.randomized_election_ticks:
            self.election_elapsed = 0
            if self.fast_election:  # one early campaign only; a failed one waits a full timeout
                self._randomize_election_timeout()
            self._hup(transfer=False)

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_ticks:
            self.election_elapsed = 0
            if self.config.check_quorum and not self._check_quorum_active():
                self._note(f"{self.id} [term {self.term}] stepped down: no quorum active")
                self._become_follower(self.term, NO_PEER)
                return
            if self.lead_transferee != NO_PEER:
                self._note(f"{self.id} [term {self.term}] aborts transfer to {self.lead_transferee}")
                self.lead_transferee = NO_PEER
        self._tick_snapshot_progress()
        if self.heartbeat_elapsed >= self.config.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._broadcast_heartbeat()

    def _check_quorum_active(self) -> bool:
        active = {self.id}
        for peer, progress in self.progress.items():
            if progress.recent_active:
                active.add(peer)
            if peer != self.id:
                progress.recent_active = False
        return quorum.has_quorum(self.voters, active)

    def _tick_snapshot_progress(self) -> None:
        for peer, progress in self.progress.items():
            if progress.state != ProgressState.SNAPSHOT:
                continue
            progress.snapshot_ticks += 1
            if progress.snapshot_ticks > self.config.election_ticks:
                # The snapshot (or its answer) was lost: probe again, which re-sends it if needed.
                progress.become_probe()
                progress.next = progress.match + 1
                self._send_append(peer)

    # --- elections -----------------------------------------------------------------------------
    def _hup(self, *, transfer: bool) -> None:
        if self.role == Role.LEADER:
            return
        if not self._promotable():
            self._note(f"{self.id} is not a voter and cannot campaign")
            return
        if self._has_unapplied_conf_change():
            self._note(f"{self.id} cannot campaign: a committed membership change is not applied yet")
            return
        self._campaign(pre_vote=self.config.pre_vote and not transfer, transfer=transfer)

    def _has_unapplied_conf_change(self) -> bool:
        if self.log.committed <= self.log.applied:
            return False
        lo = max(self.log.applied + 1, self.log.first_index())
        pending = self.log.slice(lo, self.log.committed + 1, 1 << 62)
        return any(entry.type == EntryType.CONF_CHANGE for entry in pending)

    def _campaign(self, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term, vote_type = self.term + 1, MT.PRE_VOTE
        else:
            self._become_candidate()
            vote_term, vote_type = self.term, MT.VOTE
        self.votes[self.id] = True
        if quorum.vote_result(self.voters, self.votes) == quorum.VoteResult.WON:
            self._won_election(pre_vote=pre_vote, transfer=transfer)
            return
        context = TRANSFER_CONTEXT if transfer else b""
        for peer in self.voters:
            if peer == self.id:
                continue
            self._send(Message(vote_type, self.id, peer, term=vote_term, log_term=self.log.last_term(),
                               index=self.log.last_index(), context=context))

    def _won_election(self, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._campaign(pre_vote=False, transfer=transfer)
        else:
            self._become_leader()

    def _handle_vote_request(self, m: Message) -> None:
        response_type = MT.VOTE_RESP if m.type == MT.VOTE else MT.PRE_VOTE_RESP
        can_vote = not self.abstaining and (
            self.vote == m.sender
            or (self.vote == NO_PEER and self.lead == NO_PEER)
            or (m.type == MT.PRE_VOTE and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(last_index=m.index, last_term=m.log_term):
            self._note(f"{self.id} [term {self.term}] grants {m.type.name} to {m.sender} at term {m.term}")
            self._send(Message(response_type, self.id, m.sender, term=m.term))
            if m.type == MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.sender
        else:
            self._note(f"{self.id} [term {self.term}] rejects {m.type.name} from {m.sender} at term {m.term}")
            self._send(Message(response_type, self.id, m.sender, term=self.term, reject=True))

    def _step_candidate(self, m: Message) -> None:
        expected = MT.PRE_VOTE_RESP if self.role == Role.PRE_CANDIDATE else MT.VOTE_RESP
        if m.type == MT.APPEND:
            self._become_follower(m.term, m.sender)
            self._handle_append(m)
        elif m.type == MT.HEARTBEAT:
            self._become_follower(m.term, m.sender)
            self._handle_heartbeat(m)
        elif m.type == MT.SNAPSHOT:
            self._become_follower(m.term, m.sender)
            self._handle_snapshot(m)
        elif m.type == expected:
            self.votes.setdefault(m.sender, not m.reject)
            result = quorum.vote_result(self.voters, self.votes)
            if result == quorum.VoteResult.WON:
                self._won_election(pre_vote=self.role == Role.PRE_CANDIDATE, transfer=False)
            elif result == quorum.VoteResult.LOST:
                self._become_follower(self.term, NO_PEER)

    # --- follower ------------------------------------------------------------------------------
    def _step_follower(self, m: Message) -> None:
        if m.type in (MT.APPEND, MT.HEARTBEAT, MT.SNAPSHOT):
            self.election_elapsed = 0
            self.lead = m.sender
            if self.fast_election:  # the leader is alive after all (the connection flapped)
                self._randomize_election_timeout()
        if m.type == MT.APPEND:
            self._handle_append(m)
        elif m.type == MT.HEARTBEAT:
            self._handle_heartbeat(m)
        elif m.type == MT.SNAPSHOT:
            self._handle_snapshot(m)
        elif m.type == MT.TIMEOUT_NOW and self.abstaining:
            self._note(f"{self.id} [term {self.term}] ignores TIMEOUT_NOW from {m.sender}: abstaining")
        elif m.type == MT.TIMEOUT_NOW:
            self._note(f"{self.id} [term {self.term}] received TIMEOUT_NOW from {m.sender}")
            self._hup(transfer=True)

    def _handle_append(self, m: Message) -> None:
        if m.index < self.log.committed:
            self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term, index=self.log.committed))
            self._matched_leader(self.log.committed)
            return
        last_new = self.log.maybe_append(prev_index=m.index, prev_term=m.log_term, commit=m.commit,
                                         entries=m.entries, check_match=not self.bugs.no_log_matching_check)
        if last_new is not None:
            self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term, index=last_new))
            self._matched_leader(last_new)
            return
        hint_index, hint_term = self.log.find_conflict_by_term(min(m.index, self.log.last_index()), m.log_term)
        self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term, index=m.index, reject=True,
                           reject_hint=hint_index, log_term=hint_term))

    def _handle_heartbeat(self, m: Message) -> None:
        if self.abstaining and (self._abstain_target is None or self._abstain_target[0] != self.term):
            self._abstain_target = (self.term, m.index)  # this term's leader's last index (heartbeats carry it)
            self._matched_leader(0)
        last = self.log.last_index()
        if m.commit > last:
            # The leader saw us hold entries up to m.commit and we hold fewer: our log was lost
            # (a wiped store). Say where it ends; the leader sends us the rest again.
            self._note(f"{self.id} [last {last}] lacks entries up to the commit {m.commit} of {m.sender}: log lost")
            self.log.commit_to(last)
            self._send(Message(MT.HEARTBEAT_RESP, self.id, m.sender, term=self.term, reject=True, reject_hint=last))
            return
        self.log.commit_to(m.commit)
        self._send(Message(MT.HEARTBEAT_RESP, self.id, m.sender, term=self.term))

    def _handle_snapshot(self, m: Message) -> None:
        assert m.snapshot is not None
        if self._restore(m.snapshot):
            self._note(f"{self.id} [commit {self.log.committed}] restored snapshot at {m.snapshot.meta.index}")
            self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term, index=self.log.last_index()))
            self._matched_leader(self.log.last_index())
        else:
            self._send(Message(MT.APPEND_RESP, self.id, m.sender, term=self.term, index=self.log.committed))
            self._matched_leader(self.log.committed)

    def _matched_leader(self, index: int) -> None:
        """Our log equals the current leader's up to `index`; an abstaining voter that now holds
        everything its leader held when first heard takes part in elections again."""
        if not self.abstaining:
            return
        if self._leader_match[0] == self.term:
            index = max(index, self._leader_match[1])
        self._leader_match = (self.term, index)
        if self._abstain_target is not None and self._abstain_target[0] == self.term and index >= self._abstain_target[1]:
            self.abstaining = False
            self._note(f"{self.id} [term {self.term}] caught up to {index} "
                       f"(leader {self.lead} held {self._abstain_target[1]}): votes again")

    def _restore(self, snapshot: Snapshot) -> bool:
        meta = snapshot.meta
        if meta.index <= self.log.committed:
            return False
        if self.log.match_term(meta.index, meta.term):
            self.log.commit_to(meta.index)
            return False
        self.log.restore(snapshot)
        self.voters, self.learners = meta.conf.voters, meta.conf.learners
        return True

    # --- leader --------------------------------------------------------------------------------
    def _check_can_propose(self, count: int) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(f"{self.id} is not the leader", leader_hint=self.lead or None)
        if self.lead_transferee != NO_PEER:
            raise ProposalDropped(f"leadership is moving to {self.lead_transferee}")
        uncommitted = self.log.last_index() - self.log.committed
        if uncommitted + count > self.config.uncommitted_entries_max:
            raise LimitExceeded(f"{uncommitted} uncommitted entries (max {self.config.uncommitted_entries_max})")

    def _append_entries(self, entries: list[Entry]) -> None:
        last = self.log.append(entries)
        self.progress[self.id].maybe_update(last)
        self._maybe_commit()
        self._needs_broadcast = True

    def _maybe_commit(self) -> bool:
        matches = {peer: progress.match for peer, progress in self.progress.items()}
        index = quorum.committed_index(self.voters, matches)
        if index <= self.log.committed:
            return False
        if self.log.term(index) != self.term and not self.bugs.commit_previous_term:
            return False  # §5.4.2: only current-term entries commit by counting replicas
        self.log.commit_to(index)
        return True

    def _broadcast_append(self, *, send_empty: bool = False) -> None:
        """Send new entries to every follower; with send_empty, at least carry the new commit index."""
        for peer in self.progress:
            if peer != self.id:
                self._send_append_pipeline(peer, send_empty=send_empty)

    def _broadcast_heartbeat(self) -> None:
        for peer, progress in self.progress.items():
            if peer != self.id:
                commit = min(progress.match, self.log.committed)
                # index: our last index, which a follower that lost its state must reach (abstain)
                self._send(Message(MT.HEARTBEAT, self.id, peer, term=self.term, commit=commit,
                                   index=self.log.last_index()))

    def _send_append_pipeline(self, peer: str, *, send_empty: bool = False) -> None:
        """Send as many appends as the follower's window allows (at least an empty one in probe)."""
        progress = self.progress[peer]
        sent = self._send_append(peer, send_empty=send_empty)
        while sent and progress.state == ProgressState.REPLICATE and progress.next <= self.log.last_index():
            sent = self._send_append(peer)

    def _send_append(self, peer: str, *, send_empty: bool = False) -> bool:
        progress = self.progress[peer]
        if progress.is_paused():
            return False
        prev_index = progress.next - 1
        prev_term = self.log.term(prev_index)
        if prev_term is None or progress.next < self.log.first_index():
            return self._send_snapshot(peer, progress)
        last = self.log.last_index()
        entries = self.log.slice(progress.next, last + 1, self.config.append_bytes_max) if progress.next <= last else []
        if not entries and progress.state == ProgressState.REPLICATE and not send_empty:
            return False
        self._send(Message(MT.APPEND, self.id, peer, term=self.term, log_term=prev_term, index=prev_index,
                           entries=tuple(entries), commit=self.log.committed))
        progress.sent_entries(last_index=prev_index + len(entries), count=len(entries))
        return True

    def _send_snapshot(self, peer: str, progress: Progress) -> bool:
        snapshot = self.log.storage.snapshot()
        assert not snapshot.is_empty(), "a follower behind the log needs a snapshot the leader has"
        progress.become_snapshot(snapshot.meta.index)
        progress.snapshot_sent = snapshot.meta.index
        self._note(f"{self.id} [first {self.log.first_index()}] sends snapshot at {snapshot.meta.index} to {peer}")
        self._send(Message(MT.SNAPSHOT, self.id, peer, term=self.term, snapshot=snapshot))
        return True

    def _step_leader(self, m: Message) -> None:
        progress = self.progress.get(m.sender)
        if progress is None:
            return
        if m.type in (MT.APPEND_RESP, MT.HEARTBEAT_RESP):
            progress.recent_active = True
            progress.last_contact_tick = self.tick_count
            progress.degraded = m.context == DEGRADED_CONTEXT
        if m.type == MT.APPEND_RESP:
            if m.reject:
                self._handle_append_reject(m, progress)
            else:
                self._handle_append_success(m, progress)
        elif m.type == MT.HEARTBEAT_RESP:
            self._handle_heartbeat_response(m, progress)

    def _handle_append_reject(self, m: Message, progress: Progress) -> None:
        next_probe = m.reject_hint
        if m.log_term > 0:
            next_probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
        if progress.maybe_decrease_to(rejected=m.index, match_hint=next_probe):
            if progress.state == ProgressState.REPLICATE:
                progress.become_probe()
            self._send_append(m.sender)

    def _handle_append_success(self, m: Message, progress: Progress) -> None:
        was_paused = progress.is_paused()
        if progress.maybe_update(m.index):
            if progress.state == ProgressState.PROBE:
                progress.become_replicate()
            elif progress.state == ProgressState.SNAPSHOT and progress.match >= progress.pending_snapshot:
                progress.become_probe()
                progress.become_replicate()
            elif progress.state == ProgressState.REPLICATE:
                progress.inflights.free_le(m.index)
            if self._maybe_commit():
                self._broadcast_append(send_empty=True)
            elif was_paused:
                self._send_append_pipeline(m.sender, send_empty=True)  # also carries the commit index
            elif progress.next <= self.log.last_index():
                self._send_append_pipeline(m.sender)
        if m.sender == self.lead_transferee and progress.match == self.log.last_index():
            self._note(f"{self.id} sends TIMEOUT_NOW to {m.sender}: its log is up to date")
            self._send(Message(MT.TIMEOUT_NOW, self.id, m.sender, term=self.term))

    def _handle_heartbeat_response(self, m: Message, progress: Progress) -> None:
        progress.probe_sent = False
        if m.reject and m.reject_hint < progress.match:
            # the follower lost entries it had acknowledged (its store was wiped): its match is
            # where its log ends now, and it is probed from there (entries, or a snapshot)
            self._note(f"{self.id} {m.sender} lost its log after {m.reject_hint} (match was {progress.match})")
            progress.match = m.reject_hint
            progress.become_probe()
            self._send_append(m.sender)
            return
        behind = progress.match < self.log.last_index()
        if progress.state == ProgressState.REPLICATE and behind and progress.match == progress.match_at_last_heartbeat:
            progress.become_probe()  # no progress over a whole heartbeat: appends were lost
        progress.match_at_last_heartbeat = progress.match
        if behind:
            self._send_append(m.sender)

    def _most_up_to_date_peer(self) -> str:
        candidates = [(pr.match, peer) for peer, pr in self.progress.items() if peer != self.id and peer in self.voters]
        if not candidates:
            return NO_PEER
        best_match = max(match for match, _ in candidates)
        return min(peer for match, peer in candidates if match == best_match)

    # --- membership ----------------------------------------------------------------------------
    def _conf_at_applied(self, conf: ConfState) -> ConfState:
        """`conf` (the snapshot's) after the changes in the log up to the applied index."""
        lo, hi = self.log.first_index(), self.log.applied
        if hi < lo:
            return conf
        for entry in self.log.slice(lo, hi + 1, 1 << 62):
            if entry.type == EntryType.CONF_CHANGE:
                change = decode_conf_change(entry.data)
                conf = ConfState(change.voters_after, change.learners_after)
        return conf

    def _apply_conf_change(self, change: ConfChange) -> None:
        self.voters, self.learners = change.voters_after, change.learners_after
        learners = f"; learners {','.join(self.learners)}" if self.learners else ""
        self._note(f"{self.id} applied {change.op.name} {change.peer}: voters {','.join(self.voters) or '-'}{learners}")
        if self.role != Role.LEADER:
            return
        if change.op in (ConfChangeOp.ADD, ConfChangeOp.ADD_LEARNER) and change.peer not in self.progress:
            self.progress[change.peer] = self._new_progress(self.log.last_index() + 1)
            self._needs_broadcast = True
        if change.op == ConfChangeOp.REMOVE:
            self.progress.pop(change.peer, None)
            if self.lead_transferee == change.peer:
                self.lead_transferee = NO_PEER
        if self.id not in self.voters:
            self._step_down_removed()
            return
        if self._maybe_commit():
            self._needs_broadcast = True

    def _step_down_removed(self) -> None:
        successor = self._most_up_to_date_peer()
        if successor != NO_PEER and self.progress[successor].match == self.log.last_index():
            self._send(Message(MT.TIMEOUT_NOW, self.id, successor, term=self.term))
        self._note(f"{self.id} [term {self.term}] was removed and steps down")
        self._become_follower(self.term, NO_PEER)

    # --- output --------------------------------------------------------------------------------
    def _send(self, m: Message) -> None:
        assert m.to != self.id
        if self.degraded and m.type in (MT.APPEND_RESP, MT.HEARTBEAT_RESP):
            m = dataclasses.replace(m, context=DEGRADED_CONTEXT)
        self.messages.append(m)

    def _note(self, text: str) -> None:
        if self._events is not None:
            self._events(text)
        else:
            logger.debug(text)
