"""Acks of a consumer (ADR-15): +ACK, -NAK (with delay), +WPI, +TERM, +NXT and AckSync, batched
into one operation per loop turn; ack_wait / backoff timers and redelivery up to max_deliver.

Acks at a leader change. Every server of a cluster hears every ack; only the consumer's leader
takes them, once it is ready (it applied its predecessors' entries). A replica that does not lead
(a follower, a leader not ready yet) keeps each plain ack (+ACK or empty; an AckSync has a reply)
it hears for JS_ACK_HOLD_S (at most JS_ACK_HELD_MAX): when it takes over delivery in a new term
within that time, it takes those acks whose message is still pending in the replicated state, and
answers each once its ack is replicated. So an AckSync sent at a step-down (while the old leader
hands over: its ack proposal is refused; or while no replica leads) is answered by the next
leader and not left unanswered. nats-server answers it 503 No Responders (its old leader dropped
the ack subscription, the new one has not subscribed yet): the client had to send it again. An
ack the old leader took is applied before the new leader is ready: it is no longer pending, and
the old leader answers it (its proposal commits); an ack of a message the new leader never heard
was delivered stays unanswered (as nats-server's processAckMsg)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance import limits
from appliance.cluster.group import RaftGroup
from appliance.jetstream import advisories
from appliance.jetstream import consumer_state as ops
from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.consumer_state import ConsumerState
from appliance.jetstream.decode import DURATION, GoJsonError, GoStruct, unmarshal
from appliance.jetstream.host import Host, Timer
from appliance.jetstream.pull import PullRequest
from appliance.jetstream.wire import parse_go_duration

if TYPE_CHECKING:
    from appliance.jetstream.stream import Stream

NS = 1_000_000_000


NAK_OPTIONS_TYPE = GoStruct("server.ConsumerNakOptions", {"delay": DURATION}, strict=False)


class AckHandling:
    """Mixin of Consumer: acks and redelivery."""

    if TYPE_CHECKING:
        config: ConsumerConfig
        host: Host
        state: ConsumerState
        stream: Stream
        name: str
        deleted: bool
        waiting: deque[PullRequest]
        _last_activity_ns: int
        _fc_reply: str

        def _kick(self) -> None: ...

        def num_pending(self) -> int: ...

        _redeliver: list[int]
        _deadlines: dict[int, int]
        _redeliver_timer: Timer | None
        _redeliver_due_ns: int
        _ack_batch: list[tuple[int, int]]
        _ack_replies: list[str]
        _held_acks: deque[tuple[int, int, int, str]]
        _acks_in_flight: int
        _after_acks: list[Callable[[], None]]
        replicated: bool
        next_sseq: int
        group: RaftGroup

        def _propose(self, data: bytes, *, durable: bool, done: Callable[[], None] | None = None,
                     settled: Callable[[], None] | None = None) -> bool: ...

        def on_pull(self, reply: str, body: bytes, header: bytes = b"") -> None: ...

    def on_ack(self, tokens: list[str], reply: str, body: bytes) -> None:
        """An ack on `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>` (v1 or v2 layout)."""
        offset = 4 if len(tokens) == 9 else 6
        try:
            sseq = int(tokens[offset + 1])
        except (ValueError, IndexError):
            return
        if self.replicated and not self.group.ready_to_lead():
            if body in (b"", b"+ACK"):
                self.hold_ack(sseq, _cseq(tokens, offset), reply)
            return  # another replica leads (or this one is not ready): it takes the ack
        self._last_activity_ns = self.host.now_ns()
        kind = body[:4]
        if kind == b"-NAK":
            advisories.nak(self, sseq, tokens, offset)  # type: ignore[arg-type]
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
        if kind == b"+TER":
            advisories.terminated(self, sseq, tokens, offset, body)  # type: ignore[arg-type]
        elif self.config.sample_freq:
            advisories.ack_metric(self, sseq, _cseq(tokens, offset))  # type: ignore[arg-type]
        self._ack(sseq, _cseq(tokens, offset), reply=reply)  # empty, +ACK, +OK, +TERM

    def on_plain_ack(self, sseq_token: bytes, cseq_token: bytes, reply: bytes | None) -> None:
        """An empty or +ACK body: what `on_ack` does for it, without decoding the subject."""
        try:
            sseq = int(sseq_token)
        except ValueError:
            return
        try:
            cseq = int(cseq_token)
        except ValueError:
            cseq = 0
        if self.replicated and not self.group.ready_to_lead():
            self.hold_ack(sseq, cseq, reply.decode() if reply else "")
            return
        self._last_activity_ns = self.host.now_ns()
        if self.config.sample_freq:
            advisories.ack_metric(self, sseq, cseq)  # type: ignore[arg-type]
        self._ack(sseq, cseq, reply=reply.decode() if reply else "")

    def hold_ack(self, sseq: int, cseq: int, reply: str) -> None:
        """A plain ack this replica heard while it does not lead (module doc): kept a moment."""
        held = self._held_acks
        now = self.host.now_ns()
        held.append((now, sseq, cseq, reply))
        oldest = now - int(limits.JS_ACK_HOLD_S * NS)
        while held and (len(held) > limits.JS_ACK_HELD_MAX or held[0][0] < oldest):
            held.popleft()

    def take_held_acks(self) -> None:
        """This replica took over delivery: the AckSyncs it heard lately whose message is still
        pending are its acks now (answered once replicated)."""
        held, self._held_acks = self._held_acks, deque()
        oldest = self.host.now_ns() - int(limits.JS_ACK_HOLD_S * NS)
        for heard, sseq, cseq, reply in held:
            if heard >= oldest and sseq in self.state.pending:
                self._ack(sseq, cseq, reply=reply)

    def _ack_reply(self, reply: str) -> None:
        if reply:
            self.host.send(reply, b"")

    def _ack(self, sseq: int, cseq: int, *, reply: str) -> None:
        """Queue an ack; every ack of one loop turn becomes one ACK operation (one log append)."""
        if self.config.ack_policy == "none":
            self._ack_reply(reply)
            return
        if sseq >= max(self.next_sseq, self.state.delivered_sseq + 1):
            # Not delivered yet as far as this leader knows: a previous leader delivered it and
            # its DELIVERED record was lost. As nats-server (processAckMsg), the ack is dropped
            # unanswered: an AckSync reply would promise an ack the next delivery ignores.
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

        self._acks_in_flight += 1
        self._propose(data, durable=bool(replies), done=done, settled=self._ack_settled)

    def after_acks(self, then: Callable[[], None]) -> None:
        """Run `then` once every ack this consumer has taken so far is applied (at once when none
        is on its way): a CONSUMER.INFO asked after acks sees them (nats-server applies acks on
        its consumer's goroutine: nearly always before such an INFO, not always). An ack proposal
        lost at a leader change releases it too."""
        if self.deleted or (not self._ack_batch and not self._acks_in_flight):
            then()
            return
        if len(self._after_acks) >= limits.JS_AFTER_ACKS_WAITERS_MAX:
            then()  # bounded: beyond this many waiting answers, answer from what is applied
            return
        self._after_acks.append(then)
        if self._ack_batch:
            self._flush_acks()

    def _ack_settled(self) -> None:
        self._acks_in_flight -= 1
        if self._acks_in_flight == 0 and not self._ack_batch and self._after_acks:
            waiting, self._after_acks = self._after_acks, []
            for then in waiting:
                then()

    def _nak(self, sseq: int, rest: bytes) -> None:
        if sseq not in self.state.pending:
            return
        delay_ns = 0
        if rest.startswith(b"{"):
            try:  # a bad delay is a plain NAK, as nats-server treats it
                delay_ns = int(str(unmarshal(rest, NAK_OPTIONS_TYPE, "ConsumerNakOptions").get("delay") or 0))
            except (GoJsonError, ValueError, TypeError, OverflowError):
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
            self._queue_redelivery(sseq, expired=False)

    # --- redelivery ------------------------------------------------------------------------------

    def _queue_redelivery(self, sseq: int, *, expired: bool = True) -> None:
        """A message due again. As nats-server, one delivered max_deliver times is given up on
        when a delivery is next attempted (`_give_up`, from the delivery loop), not here; only
        an ack_wait expiry with max_deliver 1 gives up at once (nats-server's checkPending
        counts deliveries from 1); a -NAK waits for the next attempt there too."""
        if expired and self.config.max_deliver == 1:
            self._give_up(sseq, 1)
            return
        if sseq not in self._redeliver and len(self._redeliver) < limits.JS_REDELIVER_QUEUE_MAX:
            self._redeliver.append(sseq)
            self._redeliver.sort()
        self._kick()

    def _give_up(self, sseq: int, deliveries: int) -> None:
        """Delivered `deliveries` (= max_deliver) times and never acked: the max-deliveries
        advisory, then out of the pending set without an ack (consumer_state module doc)."""
        advisories.max_deliveries(self, sseq, deliveries)  # type: ignore[arg-type]
        self._deadlines.pop(sseq, None)
        data = ops.op_gave_up([(sseq, deliveries)], self.host.now_ns())
        self._propose(data, durable=False, done=self._kick)

    def _exceeds_max_deliver(self, dc: int) -> bool:
        return self.config.max_deliver > 0 and dc > self.config.max_deliver

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
        unapplied = self.state.delivered_sseq
        for sseq in [s for s, due in self._deadlines.items() if due <= now]:
            if sseq in self.state.pending:
                del self._deadlines[sseq]
                self._queue_redelivery(sseq)
            elif sseq > unapplied and self.group.is_leader():
                # delivered, but its DELIVERED record is not applied yet (a slow quorum): it is
                # due as soon as it is pending; looked at again shortly, not forgotten
                self._deadlines[sseq] = now + int(limits.JS_REDELIVER_UNAPPLIED_RETRY_S * NS)
            else:
                del self._deadlines[sseq]
        self._arm_redelivery()

    def _ack_wait_ns(self, dc: int, config: ConsumerConfig | None = None) -> int:
        """How long delivery number dc waits for its ack (under `config`, by default the current)."""
        config = config or self.config
        backoff = config.backoff
        if backoff:
            return backoff[min(dc - 1, len(backoff) - 1)]
        return config.ack_wait or 30 * NS


def _cseq(tokens: list[str], offset: int) -> int:
    try:
        return int(tokens[offset + 2])
    except (ValueError, IndexError):
        return 0
