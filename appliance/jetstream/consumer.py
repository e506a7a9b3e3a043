"""A consumer: its replicated state (consumer_state.py) in a single-voter RAFT group, plus what
only the leader keeps: the next sequence to deliver, waiting pull requests, redelivery timers,
push interest, heartbeats and flow control.

Theory of operation. Work arrives as events (a stored message, a pull request, an ack, a timer);
each only schedules `_drain` for the next loop turn. `_drain` delivers while there is a target (a
waiting pull request, or an active push subscriber not held by flow control) and room under
max_ack_pending, taking due redeliveries first, then new messages from `next_sseq`. Every
delivery batch is proposed as one DELIVERED operation; acks become ACK operations. The RAFT log
is durable (DurableStorage) and the group driver (cluster/group.py) owns when it fsyncs: acks
reach disk before an AckSync is answered (answered from the commit callback); delivered records
are proposed `durable=False` and reach disk within RAFT_LAZY_SYNC_S on a single voter (a
delivery lost in a crash is redelivered), at once on a replicated consumer.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import CorruptData, LimitExceeded, NotLeader, ProposalDropped
from appliance.jetstream import consumer_state as ops
from appliance.jetstream import pause
from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.consumer_acks import AckHandling
from appliance.jetstream.consumer_pull import PullRequests, wire_size
from appliance.jetstream.consumer_push import PushDelivery
from appliance.jetstream.groups import Replication, replicated_group, start_group
from appliance.jetstream.host import Host, Timer
from appliance.jetstream.pull import PullRequest
from appliance.jetstream.storeview import count_live, first_seq_at_or_after_time, last_seq, seq_from_time
from appliance.jetstream.subjects import subject_matches
from appliance.jetstream.wire import parse_rfc3339, rfc3339
from appliance.raft.storage import LogStorage
from appliance.raft.types import Entry, EntryType
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)
NS = 1_000_000_000


class ResetRefused(Exception):
    """CONSUMER.RESET to a sequence the deliver policy does not allow (nats-server's text)."""


class Consumer(PullRequests, PushDelivery, AckHandling):
    def __init__(
        self,
        *,
        stream: Stream,
        config: ConsumerConfig,
        created_ns: int,
        host: Host,
        peer: str,
        group_id: str,
        storage: LogStorage,
        on_inactive: Callable[[Consumer], None],
        fresh: bool,
        replication: Replication | None = None,
    ) -> None:
        self.stream = stream
        self.config = config
        self.name = config.name
        self.created_ns = created_ns
        self.host = host
        self.on_inactive = on_inactive
        self.deleted = False
        self.state = ops.ConsumerState(config.ack_policy)
        self._filters = config.filters
        self.waiting: deque[PullRequest] = deque()
        self._interest_seen: PullRequest | None = None  # the request whose reply had interest this turn
        self._redeliver: list[int] = []
        self._deadlines: dict[int, int] = {}
        self._initial: deque[int] = deque()
        self._from_initial = False  # the last _next_message came from _initial
        self._pending_count: int | None = None
        self._drain_scheduled = False
        self._redeliver_timer: Timer | None = None
        self._redeliver_due_ns = 0
        self._ack_batch: list[tuple[int, int]] = []
        self._cursor: Iterator[StoredMsg] | None = None
        self._cursor_next = 0
        self._interest_timer: Timer | None = None
        self._interest_poll_s = limits.JS_PUSH_INTEREST_POLL_MIN_S
        self._ack_replies: list[str] = []
        self._acks_in_flight = 0  # ACK operations proposed, not yet applied (or lost)
        self._after_acks: list[Callable[[], None]] = []  # INFO answers waiting for them
        self._held_acks: deque[tuple[int, int, int, str]] = deque()  # AckSyncs heard while not leading
        self._inactive_timer: Timer | None = None
        self._heartbeat_timer: Timer | None = None
        self._rate_timer: Timer | None = None
        self._rate_tokens = 0.0
        self._rate_burst = 0
        self._rate_at_ns = 0
        self._fc_reply = ""
        self._fc_count = 0
        self._last_activity_ns = host.now_ns()
        self._delivered_since_heartbeat = False
        self._replay_prev_ts = 0
        self._ack_prefix: bytes | None = None  # b"$JS.ACK.<stream>.<consumer>." (delivery hot path)
        self._target = ""  # the last delivery target and its bytes
        self._target_b = b""
        self.replicated = replication is not None
        self._led_term = 0  # the term this replica last took over delivery in (replicated only)
        self._unrecorded_hold = False  # no delivery until _unhold (_unrecord)
        self._start = (1, 1)  # where the deliver policy starts, as computed here: (first, next) (_start_position)
        self._start_term = 0  # the term this replica proposed its start in (replicated, none recorded yet)
        if replication is not None:
            self.group = replicated_group(
                name=group_id, peer=peer, replication=replication, machine=self, clock=host.clock,
                rng=random.Random(host.rng.random()), scheduler=host,
                snapshot_entries=limits.RAFT_SNAPSHOT_ENTRIES,
            )
            self.group.on_lead = self._kick  # a new leader takes over delivery at once
        else:
            self.group = start_group(
                name=group_id,
                peer=peer,
                storage=storage,
                machine=self,
                clock=host.clock,
                rng=random.Random(host.rng.random()),
                scheduler=host,
            )
        self.state.restarted()
        self.next_sseq = self.state.delivered_sseq + 1
        self.next_cseq = self.state.delivered_cseq + 1
        now = host.now_ns()
        for sseq in self.state.pending:
            self._deadlines[sseq] = now + self._ack_wait_ns(self.state.redelivered.get(sseq, 1))
        if fresh:
            self._start_position()
        self._arm_redelivery()
        self._arm_timers()
        if config.rate_limit_bps:
            self._rate_reset()
        pause.arm(self, previous=None)
        self._kick()

    # --- RAFT state machine ----------------------------------------------------------------------

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.NORMAL and entry.data:
                acked = self.state.apply(entry.data)
                if not acked:
                    continue
                deadlines = self._deadlines
                for sseq in acked:
                    deadlines.pop(sseq, None)
                if self.stream.config.retention != "limits":
                    for sseq in acked:
                        self.stream.remove_acked(sseq)

    def applied_index(self) -> int:
        return 0  # everything lives in the RAFT log: replay it from the snapshot on restart

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state.restore(data)

    def _propose(self, data: bytes, *, durable: bool, done: Callable[[], None] | None = None,
                 settled: Callable[[], None] | None = None) -> bool:
        """Propose one operation; `done` runs once it is committed and applied; `settled` once it
        is applied, lost or refused. False when the group refused it (not leader, full)."""

        def on_done(ok: bool, index: int) -> None:
            if ok and done is not None:
                done()
            if settled is not None:
                settled()

        try:
            self.group.propose(data, on_done, durable=durable)
        except (NotLeader, ProposalDropped, LimitExceeded) as exc:
            logger.warning("consumer %s dropped an operation: %s", self.name, exc)
            if settled is not None:
                settled()
            return False
        return True

    def _unrecord(self, delivered: list[int]) -> None:
        """The group refused the DELIVERED record of this turn's deliveries (flat (sseq, cseq, dc,
        ts) runs): as far as the consumer's state goes they never happened, so they are made
        again (the client may see a message twice: at least once). Without this, a later record
        moved the delivered position past them and they were never pending, never redelivered.
        Delivery waits a moment first: the group is full, a retry at once would only repeat."""
        firsts = [delivered[i] for i in range(0, len(delivered), 4) if delivered[i + 2] == 1]
        for i in range(0, len(delivered), 4):
            sseq = delivered[i]
            self._deadlines.pop(sseq, None)
            if delivered[i + 2] > 1 and sseq not in self._redeliver:
                self._redeliver.append(sseq)
        self._redeliver.sort()
        if firsts:
            self.next_sseq = min(self.next_sseq, min(firsts))
        self.next_cseq = min(self.next_cseq, min(delivered[1::4]))
        self._pending_count = None
        self._cursor = None
        self._unrecorded_hold = True
        self.host.call_later(limits.JS_REDELIVER_UNAPPLIED_RETRY_S, self._unhold)

    def _unhold(self) -> None:
        self._unrecorded_hold = False
        self._kick()

    def _leads(self) -> bool:
        """Is this replica the consumer's leader? A replica that just became leader takes over
        delivery from the replicated state: on from the last delivered sequence, and every
        message still pending is due again after ack_wait (its deliverer may be gone). Only from
        that state: a replica leading again has its own position of an earlier term, past
        deliveries whose records were lost with that term (never pending, they would be skipped)."""
        group = self.group
        if not group.ready_to_lead():
            return False
        term = group.core.term
        state = self.state
        if not state.started:
            # Where delivery starts is decided once, by the first leader, and replicated: a
            # leader that finds none recorded (its predecessor's never committed) records the
            # start it computed when it opened the consumer, and delivers once that applied.
            if self._start_term != term:
                self._start_term = term
                if not self._propose(ops.op_start(*self._start), durable=True, done=self._kick):
                    self._start_term = 0  # refused (the group is full): again in a moment
                    self.host.call_later(limits.JS_REDELIVER_UNAPPLIED_RETRY_S, self._kick)
            return False
        if term != self._led_term:
            self._led_term = term
            self.next_sseq = max(state.delivered_sseq + 1, state.start_next)
            self.next_cseq = state.delivered_cseq + 1
            self._pending_count = None
            self._cursor = None
            now = self.host.now_ns()
            self._deadlines = {s: due for s, due in self._deadlines.items() if s in state.pending}
            for sseq in state.pending:
                self._deadlines.setdefault(sseq, now + self._ack_wait_ns(state.redelivered.get(sseq, 1)))
            self._redeliver = [s for s in self._redeliver if s in state.pending]
            self._arm_redelivery()
            self.take_held_acks()
        return True

    # --- where delivery starts -------------------------------------------------------------------

    def _start_position(self) -> None:
        config = self.config
        store = self.stream.store
        policy = config.deliver_policy
        start = 1
        if policy == "all":
            start = max(store.state().first_seq, 1)
        elif policy == "new":
            start = last_seq(store) + 1
        elif policy == "last":
            last = max((m.seq for m in (store.load_last(f) for f in self._filters or [">"]) if m), default=0)
            start = last if last else last_seq(store) + 1
        elif policy == "by_start_sequence":
            start = config.opt_start_seq
        elif policy == "by_start_time":
            found = first_seq_at_or_after_time(store, parse_rfc3339(config.opt_start_time))
            start = found if found else last_seq(store) + 1
        elif policy == "last_per_subject":
            seqs: set[int] = set()
            for filter_subject in self._filters or [">"]:
                for subject in store.subject_counts(filter_subject):
                    msg = store.load_last(subject)
                    if msg is not None:
                        seqs.add(msg.seq)
            self._initial = deque(sorted(seqs))
            start = self._initial[0] if self._initial else last_seq(store) + 1
        self.next_sseq = max(self.next_sseq, start)
        if self._initial:
            self.next_sseq = last_seq(store) + 1
        self._start = (start, self.next_sseq)
        if start > 1 and not self.replicated:  # replicated: its leader records it (_leads)
            self._propose(ops.op_start(start, self.next_sseq), durable=True)

    # --- stream events ---------------------------------------------------------------------------

    def wants(self, subject: str) -> bool:
        return not self._filters or any(subject_matches(f, subject) for f in self._filters)

    def has_acked(self, sseq: int) -> bool:
        return self.state.has_acked(sseq)

    def on_stored(self, seqs: Sequence[int], subjects: Sequence[str]) -> None:
        if self._pending_count is not None:
            if self._filters:
                self._pending_count += sum(1 for s in subjects if self.wants(s))
            else:
                self._pending_count += len(seqs)
        self._kick()

    def on_removed(self) -> None:
        self._pending_count = None
        self._cursor = None
        self._kick()

    def num_pending(self) -> int:
        if self._pending_count is None:
            self._pending_count = len(self._initial) + count_live(
                self.stream.store, self.next_sseq, self._filters
            )
        return self._pending_count

    def _kick(self) -> None:
        if not self._drain_scheduled and not self.deleted:
            self._drain_scheduled = True
            self.host.call_soon(self._drain)

    # --- delivery --------------------------------------------------------------------------------

    def _has_room(self, proposed: int) -> bool:
        """Under max_ack_pending, counting deliveries of this turn not applied yet."""
        return (
            self.config.ack_policy == "none"
            or len(self.state.pending) + proposed < self.config.max_ack_pending
        )

    def _next_message(self) -> tuple[StoredMsg, int] | None:
        """The next (message, delivery count): due redeliveries first, then new messages."""
        store = self.stream.store
        self._from_initial = False
        while self._redeliver:
            sseq = self._redeliver.pop(0)
            if sseq not in self.state.pending:
                continue
            dc = self.state.redelivered.get(sseq, 1) + 1
            if self._exceeds_max_deliver(dc):
                self._give_up(sseq, dc - 1)
                continue
            msg = store.load(sseq)
            if msg is None:
                continue
            return msg, dc
        while self._initial:
            msg = store.load(self._initial.popleft())
            if self._pending_count:
                self._pending_count -= 1
            if msg is not None:
                self._from_initial = True
                return msg, 1
        msg = self._load_next(self.next_sseq)
        if msg is None:
            return None
        self.next_sseq = msg.seq + 1
        if self._pending_count:
            self._pending_count -= 1
        return msg, 1

    def _load_next(self, start: int) -> StoredMsg | None:
        """The next matching message at or after start; None while a lost (damaged) sequence
        before it waits for its repair from a peer (stream.holds_lost, jetstream/repair.py)."""
        msg = self._scan_next(start)
        if msg is not None and self.stream.holds_lost(start, msg.seq):
            self._cursor = None
            return None
        return msg

    def _scan_next(self, start: int) -> StoredMsg | None:
        """The next matching message at or after start, read through a sequential scan cursor
        (one decode per block instead of one random read per message)."""
        store = self.stream.store
        filters = self._filters
        if len(filters) > 1:
            found = [m for m in (store.load_next(f, start) for f in filters) if m is not None]
            return min(found, key=lambda m: m.seq) if found else None
        cursor = self._cursor
        kept = cursor is not None and self._cursor_next == start
        if not kept:
            cursor = iter(store.scan(start, filters[0] if filters else ">"))
        assert cursor is not None
        try:
            for msg in cursor:
                if msg.seq >= start:
                    self._cursor, self._cursor_next = cursor, msg.seq + 1
                    return msg
        except (CorruptData, OSError):
            self._cursor = None
            if not kept:
                raise
            # A cursor kept from an earlier turn still holds the segment list of then: a segment
            # sealed since (renamed over the active file) or removed reads wrong. Read again.
            return self._scan_next(start)
        self._cursor = None
        if kept:
            # A kept cursor read the active file as it was then: messages stored since are
            # beyond its end. Its end is not the stream's; look again from start.
            return self._scan_next(start)
        return None

    def _peek_next(self, start: int) -> StoredMsg | None:
        filters = self._filters
        found = [
            m for m in (self.stream.store.load_next(f, start) for f in filters or [">"]) if m is not None
        ]
        return min(found, key=lambda m: m.seq) if found else None

    def _drain(self) -> None:
        self._drain_scheduled = False
        self._interest_seen = None
        if self.deleted:
            return
        if self.replicated and not self._leads():
            return  # only the consumer's leader delivers; followers apply its decisions
        if self._unrecorded_hold:
            return  # a DELIVERED record was refused a moment ago (_unrecord): _unhold kicks again
        if self.config.pause_until and pause.holds(self):
            if not self.config.is_push:
                self._finish_no_wait()  # paused: no_wait requests end at once with 404
            return
        delivered: list[int] = []  # (sseq, cseq, dc, ts_ns) per delivery, one DELIVERED operation
        count = 0
        new_count = 0
        push = self.config.is_push
        now = self.host.now_ns()
        config = self.config
        runs = (  # deliveries that _deliver_run can make
            len(self._filters) <= 1
            and config.replay_policy != "original"
            and not config.headers_only
            and not config.rate_limit_bps
        )
        while count < limits.JS_DELIVER_BATCH_MAX:
            if push:
                if not self._push_ready():
                    break
                request = None
                if runs and not self._redeliver and not self._initial:
                    limit = limits.JS_DELIVER_BATCH_MAX - count
                    sent = self._deliver_run(None, now, limit, new_count, delivered)
                    if not sent:
                        break  # no room under max_ack_pending, or no message: as the general path
                    count += sent
                    new_count += sent
                    continue
            else:
                request = self._first_live_request(now)
                if request is None:
                    break
                if runs and not request.max_bytes and not self._redeliver and not self._initial:
                    limit = limits.JS_DELIVER_BATCH_MAX - count
                    sent = self._deliver_run(request, now, limit, new_count, delivered)
                    if not sent:
                        break  # no room under max_ack_pending, or no message: as the general path
                    count += sent
                    new_count += sent
                    continue
            if not self._redeliver and not self._has_room(new_count):
                break  # redeliveries are pending already: max_ack_pending only holds back new ones
            if self.config.replay_policy == "original" and self._replay_wait(now):
                break
            found = self._next_message()
            if found is None:
                break
            msg, dc = found
            ack = self._ack_subject(msg, dc)
            held = (  # rate_limit_bps: the message waits for its bytes in the bucket
                push
                and config.rate_limit_bps
                and not self._rate_take(wire_size(msg, ack), self.host.now_ns())
            )
            if held or (request is not None and not self._fits(request, msg, ack)):
                if self._from_initial:  # last_per_subject's first messages: it stays first
                    self._initial.appendleft(msg.seq)
                    self._pending_count = None
                elif dc == 1:
                    self.next_sseq = min(self.next_sseq, msg.seq)
                    self._pending_count = None
                else:
                    self._redeliver.insert(0, msg.seq)
                if held:
                    break
                continue
            new_count += dc == 1
            count += 1
            delivered.extend(self._deliver(msg, dc, ack, request, now))
        # nats-server ends no_wait requests only at the end of the stream: not while
        # max_ack_pending holds deliveries back, nor when this turn stopped at its batch cap
        at_end = count < limits.JS_DELIVER_BATCH_MAX and (bool(self._redeliver) or self._has_room(new_count))
        if count:
            if config.ack_policy == "none":
                # Nothing stays pending: the state keeps only the highest positions (and the
                # floors follow them), so one record of the turn's last delivery is the same state.
                delivered = [max(delivered[0::4]), max(delivered[1::4]), 1, now]
            recorded = self._propose(ops.op_delivered_flat(delivered), durable=False)
            if not recorded and config.ack_policy != "none" and self.group.is_leader():
                self._unrecord(delivered)
                return
            self._last_activity_ns = now
            self._delivered_since_heartbeat = True
            self._arm_redelivery()
            if count >= limits.JS_DELIVER_BATCH_MAX:
                self._kick()
        if not push and at_end:
            self._finish_no_wait()

    def _deliver_run(
        self, request: PullRequest | None, now: int, limit: int, proposed: int, delivered: list[int]
    ) -> int:
        """The common case in one loop: new messages in stream order to one pull request (no
        max_bytes) or to the push subscriber (ready: interest, not held by flow control), no
        redeliveries waiting, instant replay, whole messages. Does per message what
        _next_message, _ack_subject and _deliver do; returns how many it delivered. A push run
        stops where _deliver would send a flow control request, and sends it."""
        config = self.config
        acking = config.ack_policy != "none"
        if request is not None:
            room = min(limit, request.batch - request.delivered)
            target = request.reply
        else:
            room = limit
            if config.flow_control:
                room = min(room, limits.JS_FLOW_CONTROL_MSGS - self._fc_count)
            target = config.deliver_subject
        if acking:
            room = min(room, config.max_ack_pending - len(self.state.pending) - proposed)
        if room <= 0:
            return 0
        prefix = self._ack_prefix
        if prefix is None:
            prefix = self._ack_prefix = f"$JS.ACK.{self.stream.config.name}.{self.name}.".encode()
        if target != self._target:
            self._target, self._target_b = target, target.encode()
        deliver = self.host.deliverer(self._target_b)
        load_next = self._load_next
        deadlines = self._deadlines
        due = now + self._ack_wait_ns(1)
        pending = self._pending_count
        if pending is None:
            pending = self.num_pending()  # counted from next_sseq: this run's messages included
        sent = size = last_ts = 0
        while sent < room:
            msg = load_next(self.next_sseq)
            if msg is None:
                break
            seq = msg.seq
            cseq = self.next_cseq
            self.next_sseq = seq + 1
            self.next_cseq = cseq + 1
            if pending:
                pending -= 1
            self._pending_count = pending
            ack = b"%s1.%d.%d.%d.%d" % (prefix, seq, cseq, msg.timestamp_ns, pending)
            headers = msg.headers
            payload = msg.payload
            deliver(msg.subject.encode(), ack, headers or None, payload)
            size += len(msg.subject) + len(ack) + len(headers) + len(payload)  # as wire_size
            if acking:
                deadlines[seq] = due
            delivered += (seq, cseq, 1, now)
            last_ts = msg.timestamp_ns
            sent += 1
        if not sent:
            return 0
        self._replay_prev_ts = last_ts
        if request is not None:
            request.delivered += sent
            request.bytes_sent += size
            if request.remaining <= 0:
                request.cancel_timers()
                self.waiting.remove(request)
        elif config.flow_control:
            self._fc_count += sent
            if self._fc_count >= limits.JS_FLOW_CONTROL_MSGS:
                self._send_flow_control()
        return sent

    def _ack_subject(self, msg: StoredMsg, dc: int) -> bytes:
        """`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` for the next delivery."""
        prefix = self._ack_prefix
        if prefix is None:
            prefix = self._ack_prefix = f"$JS.ACK.{self.stream.config.name}.{self.name}.".encode()
        pending = self._pending_count
        if pending is None:
            pending = self.num_pending()
        return b"%s%d.%d.%d.%d.%d" % (prefix, dc, msg.seq, self.next_cseq, msg.timestamp_ns, pending)

    def _deliver(
        self, msg: StoredMsg, dc: int, ack: bytes, request: PullRequest | None, now: int
    ) -> tuple[int, int, int, int]:
        config = self.config
        cseq = self.next_cseq
        self.next_cseq += 1
        header: bytes | None = msg.headers or None
        payload = msg.payload
        if config.headers_only:
            from appliance.jetstream.wire import append_headers

            header = append_headers(msg.headers, [("Nats-Msg-Size", str(len(msg.payload)))])
            payload = b""
        # nats-server sets the ack subject (the reply) even with ack_policy none
        target = request.reply if request is not None else config.deliver_subject
        if target != self._target:
            self._target, self._target_b = target, target.encode()
        self.host.deliver_raw(self._target_b, msg.subject.encode(), ack, header, payload)
        if request is not None:
            request.delivered += 1
            request.bytes_sent += wire_size(msg, ack)
            if request.remaining <= 0 or (request.max_bytes and request.bytes_left <= 0):
                request.cancel_timers()
                self.waiting.remove(request)
        elif config.flow_control:
            self._fc_count += 1
            if self._fc_count >= limits.JS_FLOW_CONTROL_MSGS:
                self._send_flow_control()
        if config.ack_policy != "none":
            self._deadlines[msg.seq] = now + self._ack_wait_ns(dc)
        self._replay_prev_ts = msg.timestamp_ns
        return (msg.seq, cseq, dc, now)

    def _replay_wait(self, now: int) -> bool:
        """replay_policy original: hold the next message until its original gap has passed."""
        if not self._replay_prev_ts:
            return False
        upcoming = self._peek_next(self.next_sseq)
        if upcoming is None:
            return False
        gap = upcoming.timestamp_ns - self._replay_prev_ts
        due = self._last_activity_ns + gap
        if gap > 0 and due > now:
            self.host.call_later((due - now) / NS, self._kick)
            self._last_activity_ns = now
            return True
        return False

    # --- CONSUMER.RESET -----------------------------------------------------------------------------

    def reset_to(self, seq: int, done: Callable[[], None] | None = None) -> int:
        """Start again at stream sequence `seq` (0: just above the ack floor), as nats-server's
        resetStartingSeq: nothing stays pending or due for redelivery, consumer sequences start
        again at 1. A sequence below where the deliver policy starts is refused (ResetRefused).
        Returns the sequence the consumer now delivers from; `done` runs once the reset is
        committed and applied (the replicated state shows it)."""
        config = self.config
        policy = config.deliver_policy
        if seq == 0:
            seq = self.state.floor_sseq + 1
        elif policy == "by_start_sequence" and seq < config.opt_start_seq:
            raise ResetRefused("below start seq")
        elif policy == "by_start_time" and seq < seq_from_time(
            self.stream.store, parse_rfc3339(config.opt_start_time)
        ):
            raise ResetRefused("below start time")
        elif policy not in ("all", "by_start_sequence", "by_start_time"):
            raise ResetRefused("not allowed")
        seq = max(seq, 1)
        def applied() -> None:
            if self.stream.config.retention == "interest":
                self.stream.on_consumer_removed()  # messages skipped over count as acknowledged
            if done is not None:
                done()

        self._propose(ops.op_reset(seq), durable=True, done=applied)
        self.next_sseq, self.next_cseq = seq, 1
        self._redeliver.clear()
        self._deadlines.clear()
        self._initial.clear()
        self._cursor = None
        self._pending_count = None
        self._replay_prev_ts = 0
        if self._redeliver_timer is not None:
            self._redeliver_timer.cancel()
            self._redeliver_timer = None
        self._kick()
        return seq

    # --- info and lifecycle ----------------------------------------------------------------------

    def info_json(self) -> dict[str, object]:
        state = self.state
        # nats-server reports its positions (o.dseq-1, o.sseq-1): past skipped, unmatched messages
        delivered: dict[str, object] = {"consumer_seq": self.next_cseq - 1, "stream_seq": self.next_sseq - 1}
        if state.delivered_ns:
            delivered["last_active"] = rfc3339(state.delivered_ns)
        if state.pending or state.floor_sseq < state.delivered_sseq:  # held below given-up messages
            floor: dict[str, object] = {"consumer_seq": state.floor_cseq, "stream_seq": state.floor_sseq}
        else:
            floor = {"consumer_seq": self.next_cseq - 1, "stream_seq": self.next_sseq - 1}
        if state.floor_ns:
            floor["last_active"] = rfc3339(state.floor_ns)
        info: dict[str, object] = {
            "stream_name": self.stream.config.name,
            "name": self.name,
            "created": rfc3339(self.created_ns),
            "config": self.config.to_json(),
            "delivered": delivered,
            "ack_floor": floor,
            "num_ack_pending": len(state.pending),
            # nats-server hides redeliveries when max_deliver is 1 (none can happen); it keeps them
            "num_redelivered": 0 if self.config.max_deliver == 1 else len(state.redelivered),
            "num_waiting": self._num_waiting(),
            "num_pending": self.num_pending(),
        }
        if self.config.is_push and self.host.has_interest(
            self.config.deliver_subject, self.config.deliver_group
        ):
            info["push_bound"] = True
        if self.config.pause_until:
            info.update(pause.info_fields(self))
        info["ts"] = rfc3339(self.host.now_ns())
        return info

    def _num_waiting(self) -> int:
        if self.waiting:
            self._interest_seen = None
            self.prune_waiting(self.host.now_ns())
        return len(self.waiting)

    def update_config(self, config: ConsumerConfig) -> None:
        """An update (CONSUMER.CREATE with a changed config that api_consumers allowed) takes
        effect on the live consumer, as nats-server's updateConfig: new filters select from the
        current position on; ack_wait / backoff move the deadlines of messages pending now;
        max_deliver, max_ack_pending, headers_only and the request limits are read per
        delivery; inactive_threshold restarts its timer; a new deliver subject gets every
        pending message again."""
        old, self.config = self.config, config
        if config.filters != self._filters:
            self._filters = config.filters
            self._cursor = None
            self._pending_count = None
            if self.stream.config.retention == "interest":
                self.stream.on_consumer_removed()  # messages that lost their last interest go
        if (old.ack_wait, old.backoff) != (config.ack_wait, config.backoff):
            self._move_deadlines(old)
        if old.inactive_threshold != config.inactive_threshold:
            self._rearm_inactive()
        if old.rate_limit_bps != config.rate_limit_bps and config.rate_limit_bps:
            self._rate_reset()
        if config.is_push and old.deliver_subject != config.deliver_subject:
            self._fc_reply = ""
            self._fc_count = 0
            for sseq in sorted(self.state.pending):
                self._deadlines.pop(sseq, None)
                self._queue_redelivery(sseq, expired=False)
        pause.arm(self, previous=old.pause_until)
        self._kick()

    def _move_deadlines(self, old: ConsumerConfig) -> None:
        """Pending messages whose deadline came from the old ack_wait / backoff get one from the
        new (counted from their delivery); a -NAK delay keeps its own."""
        for sseq, (_cseq, ts_ns) in self.state.pending.items():
            due = self._deadlines.get(sseq)
            dc = self.state.redelivered.get(sseq, 1)
            if due is not None and due == ts_ns + self._ack_wait_ns(dc, old):
                self._deadlines[sseq] = ts_ns + self._ack_wait_ns(dc)
        if self._redeliver_timer is not None:
            self._redeliver_timer.cancel()
            self._redeliver_timer = None
        self._arm_redelivery()

    def stop(self, *, deleted: bool) -> None:
        if self.deleted:
            return
        self.deleted = True
        for request in list(self.waiting):
            if deleted:  # nats-server's release of pending requests: the status line alone
                self._end_request(request, 409, "Consumer Deleted", pending_headers=False)
            else:
                request.cancel_timers()
        self.waiting.clear()
        waiting_info, self._after_acks = self._after_acks, []
        for then in waiting_info:  # INFO answers waiting for acks: from the state as it stands
            then()
        for timer in (
            self._redeliver_timer,
            self._rate_timer,
            self._inactive_timer,
            self._heartbeat_timer,
            self._interest_timer,
        ):
            if timer is not None:
                timer.cancel()
        self.group.close()  # fsyncs what lazy deliveries left unsynced
