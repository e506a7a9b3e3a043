"""A consumer: its replicated state (consumer_state.py) in a single-voter RAFT group, plus what
only the leader keeps: the next sequence to deliver, waiting pull requests, redelivery timers,
push interest, heartbeats and flow control.

Theory of operation. Work arrives as events (a stored message, a pull request, an ack, a timer);
each only schedules `_drain` for the next loop turn. `_drain` delivers while there is a target (a
waiting pull request, or an active push subscriber not held by flow control) and room under
max_ack_pending, taking due redeliveries first, then new messages from `next_sseq`. Every
delivery batch is proposed as one DELIVERED operation; acks become ACK operations. The RAFT log
is durable (DurableStorage): acks reach disk before an AckSync is answered; delivered records
reach disk at least every JS_CONSUMER_SYNC_INTERVAL_S (a delivery lost in a crash is redelivered).
"""

from __future__ import annotations

import json
import logging
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.jetstream import consumer_state as ops
from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.groups import start_group
from appliance.jetstream.host import Host, Timer
from appliance.jetstream.pull import BadPull, PullRequest, parse_pull
from appliance.jetstream.storeview import count_live, first_seq_at_or_after_time, last_seq
from appliance.jetstream.subjects import subject_matches
from appliance.jetstream.wire import parse_go_duration, parse_rfc3339, rfc3339, status_headers
from appliance.raft.storage import LogStorage
from appliance.raft.types import Entry, EntryType
from appliance.store.api import StoredMsg

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)
NS = 1_000_000_000


class SyncControl:
    """Lets the consumer decide when its RAFT log fsyncs (acks: at once; deliveries: lazily)."""

    def __init__(self, storage: LogStorage) -> None:
        self.storage = storage
        self.force = False
        self.dirty = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.storage, name)

    def save(self, hard_state: object, entries: Sequence[Entry], *, sync: bool) -> None:
        must = sync and self.force
        self.storage.save(hard_state, entries, sync=must)  # type: ignore[arg-type]
        self.dirty = self.dirty or (sync and not must)
        if must:
            self.dirty = False

    def flush(self) -> None:
        if self.dirty:
            self.storage.sync()
            self.dirty = False


class Consumer:
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
        self._redeliver: list[int] = []
        self._deadlines: dict[int, int] = {}
        self._initial: deque[int] = deque()
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
        self._inactive_timer: Timer | None = None
        self._heartbeat_timer: Timer | None = None
        self._sync_timer: Timer | None = None
        self._fc_reply = ""
        self._fc_count = 0
        self._last_activity_ns = host.now_ns()
        self._delivered_since_heartbeat = False
        self._replay_prev_ts = 0
        self._sync = SyncControl(storage)
        self.group = start_group(
            name=group_id,
            peer=peer,
            storage=self._sync,  # type: ignore[arg-type]
            machine=self,
            clock=host.clock,
            rng=random.Random(host.rng.random()),
        )
        self.next_sseq = self.state.delivered_sseq + 1
        self.next_cseq = self.state.delivered_cseq + 1
        now = host.now_ns()
        for sseq in self.state.pending:
            self._deadlines[sseq] = now + self._ack_wait_ns(self.state.redelivered.get(sseq, 1))
        if fresh:
            self._start_position()
        self._arm_redelivery()
        self._arm_timers()
        self._kick()

    # --- RAFT state machine ----------------------------------------------------------------------

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.NORMAL and entry.data:
                for sseq in self.state.apply(entry.data):
                    self._deadlines.pop(sseq, None)
                    self.stream.remove_acked(sseq)

    def applied_index(self) -> int:
        return 0  # everything lives in the RAFT log: replay it from the snapshot on restart

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state.restore(data)

    def _propose(self, data: bytes, *, durable: bool, done: Callable[[], None] | None = None) -> None:
        def on_done(ok: bool, index: int) -> None:
            if ok and done is not None:
                done()

        try:
            self.group.propose(data, on_done)
        except (NotLeader, ProposalDropped, LimitExceeded) as exc:
            logger.warning("consumer %s dropped an operation: %s", self.name, exc)
            return
        self._sync.force = durable
        try:
            self.group.process_ready()
        finally:
            self._sync.force = False
        if self._sync.dirty and self._sync_timer is None:
            self._sync_timer = self.host.call_later(limits.JS_CONSUMER_SYNC_INTERVAL_S, self._flush_log)

    def _flush_log(self) -> None:
        self._sync_timer = None
        if not self.deleted:
            self._sync.flush()

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
        if start > 1:
            self._propose(ops.op_start(start), durable=True)
        self.next_sseq = max(self.next_sseq, start)
        if self._initial:
            self.next_sseq = last_seq(store) + 1

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

    def _push_ready(self) -> bool:
        config = self.config
        if self._fc_reply:
            return False
        if self.host.has_interest(config.deliver_subject, config.deliver_group):
            self._interest_poll_s = limits.JS_PUSH_INTEREST_POLL_MIN_S
            return True
        self._poll_interest()
        return False

    def _poll_interest(self) -> None:
        """Interest can arrive from a sibling worker without a local event: look again later."""
        if self._interest_timer is not None or self.deleted:
            return
        delay = self._interest_poll_s
        self._interest_poll_s = min(delay * 2, limits.JS_PUSH_INTEREST_POLL_MAX_S)

        def again() -> None:
            self._interest_timer = None
            self._kick()

        self._interest_timer = self.host.call_later(delay, again)

    def _next_message(self) -> tuple[StoredMsg, int] | None:
        """The next (message, delivery count): due redeliveries first, then new messages."""
        store = self.stream.store
        while self._redeliver:
            sseq = self._redeliver.pop(0)
            if sseq not in self.state.pending:
                continue
            msg = store.load(sseq)
            if msg is None:
                continue
            return msg, self.state.redelivered.get(sseq, 1) + 1
        while self._initial:
            msg = store.load(self._initial.popleft())
            if self._pending_count:
                self._pending_count -= 1
            if msg is not None:
                return msg, 1
        msg = self._load_next(self.next_sseq)
        if msg is None:
            return None
        self.next_sseq = msg.seq + 1
        if self._pending_count:
            self._pending_count -= 1
        return msg, 1

    def _load_next(self, start: int) -> StoredMsg | None:
        """The next matching message at or after start, read through a sequential scan cursor
        (one decode per block instead of one random read per message)."""
        store = self.stream.store
        filters = self._filters
        if len(filters) > 1:
            found = [m for m in (store.load_next(f, start) for f in filters) if m is not None]
            return min(found, key=lambda m: m.seq) if found else None
        cursor = self._cursor
        if cursor is None or self._cursor_next != start:
            cursor = iter(store.scan(start, filters[0] if filters else ">"))
        for msg in cursor:
            if msg.seq >= start:
                self._cursor, self._cursor_next = cursor, msg.seq + 1
                return msg
        self._cursor = None
        return None

    def _peek_next(self, start: int) -> StoredMsg | None:
        filters = self._filters
        found = [
            m for m in (self.stream.store.load_next(f, start) for f in filters or [">"]) if m is not None
        ]
        return min(found, key=lambda m: m.seq) if found else None

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self.deleted:
            return
        delivered: list[tuple[int, int, int, int]] = []
        new_count = 0
        push = self.config.is_push
        now = self.host.now_ns()
        while len(delivered) < limits.JS_DELIVER_BATCH_MAX:
            if push:
                if not self._push_ready():
                    break
                request = None
            else:
                request = self._first_live_request(now)
                if request is None:
                    break
            if not self._redeliver and not self._has_room(new_count):
                break  # redeliveries are pending already: max_ack_pending only holds back new ones
            if self.config.replay_policy == "original" and self._replay_wait(now):
                break
            found = self._next_message()
            if found is None:
                break
            msg, dc = found
            ack = self._ack_subject(msg, dc)
            if request is not None and not self._fits(request, msg, ack):
                if dc == 1:
                    self.next_sseq = min(self.next_sseq, msg.seq)
                    self._pending_count = None
                else:
                    self._redeliver.insert(0, msg.seq)
                continue
            new_count += dc == 1
            delivered.append(self._deliver(msg, dc, ack, request, now))
        if delivered:
            self._propose(ops.op_delivered(delivered), durable=False)
            self._last_activity_ns = now
            self._delivered_since_heartbeat = True
            self._arm_redelivery()
            if len(delivered) >= limits.JS_DELIVER_BATCH_MAX:
                self._kick()
        if not push:
            self._finish_no_wait()

    def _ack_subject(self, msg: StoredMsg, dc: int) -> str:
        """`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` for the next delivery."""
        return (
            f"$JS.ACK.{self.stream.config.name}.{self.name}.{dc}.{msg.seq}.{self.next_cseq}."
            f"{msg.timestamp_ns}.{self.num_pending()}"
        )

    def _fits(self, request: PullRequest, msg: StoredMsg, ack: str) -> bool:
        if not request.max_bytes or _wire_size(msg, ack) <= request.bytes_left:
            return True
        self._end_request(request, 409, "Message Size Exceeds MaxBytes")
        return False

    def _deliver(
        self, msg: StoredMsg, dc: int, ack: str, request: PullRequest | None, now: int
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
        reply = ack  # nats-server sets the ack subject even with ack_policy none
        target = request.reply if request is not None else config.deliver_subject
        self.host.deliver(target, msg.subject, reply, header, payload)
        if request is not None:
            request.delivered += 1
            request.bytes_sent += _wire_size(msg, ack)
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

    def _ack_wait_ns(self, dc: int) -> int:
        backoff = self.config.backoff
        if backoff:
            return backoff[min(dc - 1, len(backoff) - 1)]
        return self.config.ack_wait or 30 * NS

    # --- pull requests ---------------------------------------------------------------------------

    def on_pull(self, reply: str, body: bytes) -> None:
        if not reply:
            return
        if self.config.is_push:
            self._status(reply, 409, "Consumer is push based")
            return
        now = self.host.now_ns()
        try:
            request = parse_pull(body, reply, self.config, now)
        except BadPull as exc:
            self._status(reply, exc.code, exc.description)
            return
        self._last_activity_ns = now
        if len(self.waiting) >= self.config.max_waiting:
            self._status(reply, 409, "Exceeded MaxWaiting")
            return
        self.waiting.append(request)
        if request.expires_at_ns:
            request.timer = self.host.call_later(
                (request.expires_at_ns - now) / NS, lambda: self._expire_request(request)
            )
        if request.heartbeat_ns:
            self._arm_pull_heartbeat(request)
        self._kick()

    def _first_live_request(self, now: int) -> PullRequest | None:
        while self.waiting:
            request = self.waiting[0]
            if request.expires_at_ns and request.expires_at_ns <= now:
                self._end_request(request, 408, "Request Timeout")
                continue
            return request
        return None

    def _finish_no_wait(self) -> None:
        """A no_wait request that could not be filled ends with 404 (even after some messages)."""
        for request in [r for r in self.waiting if r.no_wait]:
            self._end_request(request, 404, "No Messages", pending_headers=False)

    def _expire_request(self, request: PullRequest) -> None:
        request.timer = None
        if request in self.waiting:
            self._end_request(request, 408, "Request Timeout")

    def _end_request(
        self, request: PullRequest, code: int, text: str, *, pending_headers: bool = True
    ) -> None:
        request.cancel_timers()
        if request in self.waiting:
            self.waiting.remove(request)
        pairs = (
            [
                ("Nats-Pending-Messages", str(request.remaining)),
                ("Nats-Pending-Bytes", str(request.bytes_left)),
            ]
            if pending_headers
            else []
        )
        self.host.send(request.reply, b"", header=status_headers(code, text, pairs))

    def _arm_pull_heartbeat(self, request: PullRequest) -> None:
        def beat() -> None:
            request.heartbeat_timer = None
            if request in self.waiting and not self.deleted:
                self.host.send(request.reply, b"", header=self._heartbeat_headers())
                self._arm_pull_heartbeat(request)

        request.heartbeat_timer = self.host.call_later(request.heartbeat_ns / NS, beat)

    def _heartbeat_headers(self) -> bytes:
        pairs = [
            ("Nats-Last-Consumer", str(self.state.delivered_cseq)),
            ("Nats-Last-Stream", str(self.state.delivered_sseq)),
        ]
        if self._fc_reply:
            pairs.append(("Nats-Consumer-Stalled", self._fc_reply))
        return status_headers(100, "Idle Heartbeat", pairs)

    def _status(self, reply: str, code: int, text: str) -> None:
        self.host.send(reply, b"", header=status_headers(code, text))

    # --- push: flow control and heartbeats -------------------------------------------------------

    def _send_flow_control(self) -> None:
        token = "".join(
            self.host.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
            for _ in range(8)
        )
        self._fc_reply = f"$JS.FC.{self.stream.config.name}.{self.name}.{token}"
        self._fc_count = 0
        self.host.send(
            self.config.deliver_subject,
            b"",
            reply=self._fc_reply,
            header=status_headers(100, "FlowControl Request"),
        )

    def on_flow_control_reply(self, subject: str) -> None:
        if subject == self._fc_reply:
            self._fc_reply = ""
            self._kick()

    def _arm_timers(self) -> None:
        config = self.config
        if config.is_push and config.idle_heartbeat:
            self._heartbeat_timer = self.host.call_later(config.idle_heartbeat / NS, self._push_heartbeat)
        if config.inactive_threshold:
            self._inactive_timer = self.host.call_later(config.inactive_threshold / NS, self._check_inactive)

    def _push_heartbeat(self) -> None:
        self._heartbeat_timer = None
        if self.deleted:
            return
        if not self._delivered_since_heartbeat and self.host.has_interest(self.config.deliver_subject):
            self.host.send(self.config.deliver_subject, b"", header=self._heartbeat_headers())
        self._delivered_since_heartbeat = False
        self._heartbeat_timer = self.host.call_later(self.config.idle_heartbeat / NS, self._push_heartbeat)

    def _check_inactive(self) -> None:
        self._inactive_timer = None
        if self.deleted:
            return
        config = self.config
        now = self.host.now_ns()
        if config.is_push:
            active = self.host.has_interest(config.deliver_subject, config.deliver_group)
        else:
            active = bool(self.waiting)
        if active:
            self._last_activity_ns = now
        elif now - self._last_activity_ns >= config.inactive_threshold:
            self.on_inactive(self)
            return
        delay = max(
            config.inactive_threshold - (now - self._last_activity_ns), config.inactive_threshold // 4
        )
        self._inactive_timer = self.host.call_later(delay / NS, self._check_inactive)

    def on_interest(self) -> None:
        if self.config.is_push:
            self._last_activity_ns = self.host.now_ns()
            self._kick()

    # --- acks ------------------------------------------------------------------------------------

    def on_ack(self, tokens: list[str], reply: str, body: bytes) -> None:
        """An ack on `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>` (v1 or v2 layout)."""
        offset = 4 if len(tokens) == 9 else 6
        try:
            sseq = int(tokens[offset + 1])
        except (ValueError, IndexError):
            return
        self._last_activity_ns = self.host.now_ns()
        kind = body[:4]
        if kind == b"-NAK":
            self._nak(sseq, body[4:].strip())
            self._ack_reply(reply)
            return
        if kind == b"+WPI":
            if sseq in self.state.pending:
                self._deadlines[sseq] = self.host.now_ns() + self._ack_wait_ns(
                    self.state.redelivered.get(sseq, 1)
                )
                self._arm_redelivery()
            self._ack_reply(reply)
            return
        if kind == b"+NXT":
            self._ack(sseq, _cseq(tokens, offset), reply="")
            rest = body[4:].strip()
            if reply:
                self.on_pull(reply, rest)
            return
        self._ack(sseq, _cseq(tokens, offset), reply=reply)  # empty, +ACK, +OK, +TERM

    def _ack_reply(self, reply: str) -> None:
        if reply:
            self.host.send(reply, b"")

    def _ack(self, sseq: int, cseq: int, *, reply: str) -> None:
        """Queue an ack; every ack of one loop turn becomes one ACK operation (one log append)."""
        if self.config.ack_policy == "none":
            self._ack_reply(reply)
            return
        if not self._ack_batch:
            self.host.call_soon(self._flush_acks)
        self._ack_batch.append((sseq, cseq))
        if reply:
            self._ack_replies.append(reply)

    def _flush_acks(self) -> None:
        batch, replies = self._ack_batch, self._ack_replies
        self._ack_batch, self._ack_replies = [], []
        if not batch or self.deleted:
            return
        now = self.host.now_ns()
        if self.config.ack_policy == "all":
            sseq, cseq = max(batch)
            data = ops.op_acked_all(sseq, cseq, now)
        else:
            data = ops.op_acked([sseq for sseq, _ in batch], now)

        def done() -> None:
            for reply in replies:
                self._ack_reply(reply)
            self._kick()

        self._propose(data, durable=bool(replies), done=done)

    def _nak(self, sseq: int, rest: bytes) -> None:
        if sseq not in self.state.pending:
            return
        delay_ns = 0
        if rest.startswith(b"{"):
            try:
                delay_ns = int(json.loads(rest).get("delay", 0))
            except (ValueError, AttributeError):
                delay_ns = 0
        elif rest:
            try:
                delay_ns = parse_go_duration(rest.decode())
            except ValueError:
                delay_ns = 0
        if delay_ns > 0:
            self._deadlines[sseq] = self.host.now_ns() + delay_ns
            self._arm_redelivery()
        else:
            self._deadlines.pop(sseq, None)
            self._queue_redelivery(sseq)

    # --- redelivery ------------------------------------------------------------------------------

    def _queue_redelivery(self, sseq: int) -> None:
        max_deliver = self.config.max_deliver
        if max_deliver > 0 and self.state.redelivered.get(sseq, 1) >= max_deliver:
            # delivered max_deliver times: given up on, which frees its max_ack_pending slot
            self._propose(ops.op_acked([sseq], self.host.now_ns()), durable=False, done=self._kick)
            return
        if sseq not in self._redeliver and len(self._redeliver) < limits.JS_REDELIVER_QUEUE_MAX:
            self._redeliver.append(sseq)
            self._redeliver.sort()
        self._kick()

    def _arm_redelivery(self) -> None:
        if not self._deadlines or self.deleted:
            return
        due = min(self._deadlines.values())
        if self._redeliver_timer is not None:
            if self._redeliver_due_ns <= due:
                return
            self._redeliver_timer.cancel()
        self._redeliver_due_ns = due
        delay_s = max((due - self.host.now_ns()) / NS, 0.001)
        self._redeliver_timer = self.host.call_later(delay_s, self._redeliver_due)

    def _redeliver_due(self) -> None:
        self._redeliver_timer = None
        if self.deleted:
            return
        now = self.host.now_ns()
        for sseq in [s for s, due in self._deadlines.items() if due <= now]:
            del self._deadlines[sseq]
            if sseq in self.state.pending:
                self._queue_redelivery(sseq)
        self._arm_redelivery()

    # --- info and lifecycle ----------------------------------------------------------------------

    def info_json(self) -> dict[str, object]:
        state = self.state
        delivered: dict[str, object] = {
            "consumer_seq": state.delivered_cseq,
            "stream_seq": state.delivered_sseq,
        }
        if state.delivered_ns:
            delivered["last_active"] = rfc3339(state.delivered_ns)
        floor: dict[str, object] = {"consumer_seq": state.floor_cseq, "stream_seq": state.floor_sseq}
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
            "num_redelivered": len(state.redelivered),
            "num_waiting": len(self.waiting),
            "num_pending": self.num_pending(),
        }
        if self.config.is_push and self.host.has_interest(
            self.config.deliver_subject, self.config.deliver_group
        ):
            info["push_bound"] = True
        info["ts"] = rfc3339(self.host.now_ns())
        return info

    def update_config(self, config: ConsumerConfig) -> None:
        self.config = config
        self._kick()

    def stop(self, *, deleted: bool) -> None:
        if self.deleted:
            return
        self.deleted = True
        for request in list(self.waiting):
            if deleted:
                self._end_request(request, 409, "Consumer Deleted")
            else:
                request.cancel_timers()
        self.waiting.clear()
        for timer in (
            self._redeliver_timer,
            self._inactive_timer,
            self._heartbeat_timer,
            self._sync_timer,
            self._interest_timer,
        ):
            if timer is not None:
                timer.cancel()
        self._sync.flush()


def _cseq(tokens: list[str], offset: int) -> int:
    try:
        return int(tokens[offset + 2])
    except (ValueError, IndexError):
        return 0


def _wire_size(msg: StoredMsg, ack: str) -> int:
    """What a delivery counts against a pull request's max_bytes (nats-server: subject + reply +
    headers + payload)."""
    return len(msg.subject) + len(ack) + len(msg.headers) + len(msg.payload)
