"""A source or mirror whose origin stream is not open on this server (a cluster where the origin
lives on other servers), read the way nats-server reads every origin (setupMirrorConsumer,
setupSourceConsumer): the stream leader creates an ephemeral push consumer on the origin through
the JetStream API — deliver_subject an inbox of its own, ack_policy none, flow_control, an idle
heartbeat, deliver_policy by_start_sequence at the next origin sequence it needs (or the source's
start policy), the source's filter, an inactive_threshold so an abandoned one goes away — and
copies each delivery through the stream's ordinary path (a MIRROR operation with the origin's
sequences and times; a source's publish with its Nats-Stream-Source header).

The origin sequence, delivery count and time come from the delivery's ack reply
(`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`). A consumer sequence that
is not the next one (the origin's leader changed, a delivery lost), a heartbeat naming a later one,
or silence for JS_SOURCE_STALL_S makes the consumer again from the next sequence the stream needs;
deliveries of an older consumer are told apart by a generation token in the inbox and dropped.
Bounded: deliveries wait in a list while one copy batch is in flight; a flow-control request is
answered only once nothing is in flight and the list is empty (so at most one window is
outstanding); a list over JS_SOURCE_PENDING_MAX makes the consumer again instead of growing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import LimitExceeded, NotLeader, ProposalDropped
from appliance.jetstream.storeview import last_seq
from appliance.jetstream.wire import header_value, rfc3339
from appliance.server.internal import InternalClient
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.jetstream.sources import SourceState, Sourcing

LOG = logging.getLogger(__name__)
PREFIX = "$JSMIR."  # $JSMIR.<ident>.<source index>.<generation>.<d: deliveries | c: the create answer>
STREAM_NOT_FOUND = 10059
NS = 1_000_000_000
ACK_WAIT_NS = 22 * 3600 * NS  # nats-server's mirror/source consumer ack_wait (22 h)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a push delivery's ack reply says."""

    stream: str
    consumer: str
    delivered: int
    sseq: int
    cseq: int
    ts_ns: int
    pending: int


def parse_ack_reply(reply: bytes | str | None) -> Delivery | None:
    """`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` (v1) or the v2 form
    with `<domain>.<account hash>` after ACK and a trailing token; None for anything else."""
    if not reply:
        return None
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
    tokens = text.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    offset = 2 if len(tokens) == 9 else 4
    if len(tokens) < offset + 7:
        return None
    numbers = tokens[offset + 2 : offset + 7]
    if not all(n.isdigit() for n in numbers):
        return None
    delivered, sseq, cseq, ts_ns, pending = (int(n) for n in numbers)
    return Delivery(tokens[offset], tokens[offset + 1], delivered, sseq, cseq, ts_ns, pending)


def start_policy(next_seq: int, start_seq: int, start_time_ns: int) -> dict[str, object]:
    """Where the origin consumer starts: at the next sequence the stream needs once it is known
    (something was copied, or the mirror holds messages), else the source's own start."""
    if next_seq > 0:
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": next_seq}
    if start_seq > 0:
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": start_seq}
    if start_time_ns > 0:
        return {"deliver_policy": "by_start_time", "opt_start_time": rfc3339(start_time_ns)}
    return {"deliver_policy": "all"}


def consumer_request(origin: str, deliver: str, start: dict[str, object],
                     filters: list[str]) -> dict[str, object]:
    """The CONSUMER.CREATE request for an origin (nats-server's mirror/source consumer config)."""
    config: dict[str, object] = {
        "deliver_subject": deliver,
        "ack_policy": "none",
        "ack_wait": ACK_WAIT_NS,
        "max_deliver": 1,
        "flow_control": True,
        "idle_heartbeat": int(limits.JS_SOURCE_HEARTBEAT_S * NS),
        "inactive_threshold": int(limits.JS_SOURCE_INACTIVE_S * NS),
        "num_replicas": 1,
        "mem_storage": True,
        **start,
    }
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    elif filters:
        config["filter_subjects"] = filters
    return {"stream_name": origin, "config": config}


def next_step(expected_cseq: int, delivery: Delivery, last_copied: int) -> str:
    """What to do with a delivery: "copy" it, "skip" it (an origin sequence already copied), or
    "restart" the consumer (not the next consumer sequence: a delivery was lost or the consumer is
    another one)."""
    if delivery.cseq != expected_cseq:
        return "restart"
    if delivery.sseq <= last_copied:
        return "skip"
    return "copy"


def heartbeat_gap(expected_cseq: int, header: bytes) -> bool:
    """An idle heartbeat whose Nats-Last-Consumer is past what we got: deliveries were lost."""
    last = header_value(header, b"Nats-Last-Consumer")
    return last is not None and last.strip().isdigit() and int(last.strip()) >= expected_cseq


class RemoteOrigin:
    """One source's (or the mirror's) consumer on a origin stream held by other servers."""

    def __init__(self, sourcing: Sourcing, index: int, source: SourceState) -> None:
        self.sourcing = sourcing
        self.ajs = sourcing.ajs
        self.index = index
        self.source = source
        self.generation = 0
        self.consumer = ""  # the current consumer's name, once its create answer came
        self.expected_cseq = 1
        self.heard_ns = 0  # the last delivery, heartbeat or create answer (0: no consumer asked for)
        self.pending: list[tuple[int, str, bytes, bytes, int]] = []  # sseq, subject, headers, payload, ts
        self.in_flight_ns = 0  # when the copy in flight was proposed (0: none)
        self.held_fc = b""  # a flow-control request answered once the copies caught up
        self.lag = 0
        self.retry_at_ns = 0
        self.closed = False
        self._flush_queued = False
        # an own client: deliveries reach it under the origin's subjects (the deliver subject is
        # only what they are routed on), so each consumer's deliver subject has its own handler
        self.client = InternalClient(self.ajs.server, self.ajs.account,
                                     f"JetStream origin {source.name} of {sourcing.stream.config.name}")
        self._base = f"{PREFIX}{sourcing.ident}.{index}"
        self.client.subscribe(f"{self._base}.*.c".encode(), self._on_create_answer)
        self._deliveries: Subscription | None = None

    # --- the consumer ----------------------------------------------------------------------------

    def tick(self) -> None:
        """Called by the sourcing's poll: (re)create the consumer when none answers."""
        if self.closed:
            return
        now = self.ajs.now_ns()
        if self.in_flight_ns and now - self.in_flight_ns > limits.JS_SOURCE_PROPOSAL_TIMEOUT_S * NS:
            self.in_flight_ns = 0  # a dropped proposal: read again from where the stream is
            if self.source.mirror:
                self.source.last_seq = last_seq(self.sourcing.stream.store)
                self.source.next_seq = self.source.last_seq + 1 if self.source.last_seq else 0
            self.restart()
            return
        source = self.source
        if source.refused_seq and source.retry_at_ns > now and self.retry_at_ns < source.retry_at_ns:
            self.pause(source.retry_at_ns)  # a source's copy was refused: read again from it, later
            return
        if now < self.retry_at_ns:
            return
        if self.heard_ns == 0 or now - self.heard_ns > limits.JS_SOURCE_STALL_S * NS:
            self.restart()

    def pause(self, until_ns: int) -> None:
        """No consumer until then (a refused copy, a refused proposal); then one from where the
        stream is. Deliveries of the current one are dropped from now on."""
        self._delete_consumer()
        self.generation += 1
        self.pending.clear()
        self.held_fc = b""
        self.heard_ns = 1  # stale: the first tick after `until_ns` makes the consumer again
        self.retry_at_ns = until_ns

    def restart(self) -> None:
        """A new consumer from the next sequence the stream needs; the old one is deleted."""
        self._delete_consumer()
        self.generation += 1
        self.expected_cseq = 1
        self.pending.clear()
        self.held_fc = b""
        self.heard_ns = self.ajs.now_ns()
        source = self.source
        base = f"{self._base}.{self.generation}"
        generation = self.generation

        def on_delivery(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            self.on_message(generation, "d", subject, reply, header, data)

        self._deliveries = self.client.subscribe(f"{base}.d".encode(), on_delivery)
        filters = [t.src for t in source.transforms] if source.transforms else (
            [source.filter_subject] if source.filter_subject else [])
        start = start_policy(source.next_seq, source.start_seq, source.start_time_ns)
        body = consumer_request(source.name, f"{base}.d", start, filters)
        self._send(f"$JS.API.CONSUMER.CREATE.{source.name}", json.dumps(body).encode(), f"{base}.c")

    def _send(self, subject: str, payload: bytes, reply: str) -> None:
        if not self.client.closed:
            self.client.publish(subject.encode(), payload, reply=reply.encode() if reply else None)

    def _on_create_answer(self, subject: bytes, reply: bytes | None, header: bytes | None,
                          data: bytes) -> None:
        generation = subject.split(b".")[-2]
        if generation.isdigit():
            self.on_message(int(generation), "c", subject, reply, header, data)

    def _delete_consumer(self) -> None:
        if self._deliveries is not None:
            self.client.unsubscribe(self._deliveries)
            self._deliveries = None
        if self.consumer:
            self._send(f"$JS.API.CONSUMER.DELETE.{self.source.name}.{self.consumer}", b"", "")
            self.consumer = ""

    def close(self) -> None:
        self.closed = True
        self._delete_consumer()
        self.pending.clear()
        self.client.close()

    def on_message(self, generation: int, kind: str, subject: bytes, reply: bytes | None,
                   header: bytes | None, data: bytes) -> None:
        if self.closed or generation != self.generation:
            return  # an older consumer's
        now = self.ajs.now_ns()
        if kind == "c":
            self._on_created(data, now)
            return
        if kind != "d":
            return
        self.heard_ns = now
        self.source.active_ns = now
        payload = data[len(header) :] if header else data
        if header and header.startswith(b"NATS/1.0 100"):
            if reply:  # a flow-control request
                self.held_fc = reply
                self._answer_flow_control()
            elif heartbeat_gap(self.expected_cseq, header):
                self.restart()
            else:  # a heartbeat naming a flow-control request not answered (one lost): answer it
                stalled = header_value(header, b"Nats-Consumer-Stalled")
                if stalled and stalled.strip():
                    self.held_fc = stalled.strip()
                    self._answer_flow_control()
            return
        if reply and b"@" in reply:  # a route's `<ack reply>@<stream subject>`, if not undone yet
            reply, _, subject = reply.rpartition(b"@")
        delivery = parse_ack_reply(reply)
        if delivery is None:
            return
        step = next_step(self.expected_cseq, delivery, self._copied_up_to())
        if step == "restart":
            self.restart()
            return
        self.expected_cseq += 1
        self.lag = delivery.pending
        if step == "skip":
            return
        if len(self.pending) >= limits.JS_SOURCE_PENDING_MAX:
            self.restart()  # never a longer list: read again from what was copied
            return
        self.pending.append((delivery.sseq, subject.decode(errors="replace"), header or b"", payload,
                             delivery.ts_ns))
        if not self._flush_queued:
            self._flush_queued = True
            self.ajs.call_soon(self._flush)

    def _copied_up_to(self) -> int:
        return self.pending[-1][0] if self.pending else self.source.last_seq

    def _on_created(self, data: bytes, now: int) -> None:
        try:
            answer = json.loads(data)
        except ValueError:
            return
        if not isinstance(answer, dict):
            return
        error = answer.get("error")
        if isinstance(error, dict):
            self.source.missing = error.get("err_code") == STREAM_NOT_FOUND
            self.heard_ns = 0
            self.retry_at_ns = now + int(limits.JS_SOURCE_STALL_S * NS)  # asked again after this
            return
        self.source.missing = False
        self.heard_ns = now
        self.consumer = str(answer.get("name") or "")

    # --- copies ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_queued = False
        if self.closed or self.in_flight_ns or not self.pending:
            self._answer_flow_control()
            return
        batch = self.pending[: limits.JS_SOURCE_BATCH_MAX]
        del self.pending[: len(batch)]
        source = self.source
        if not source.mirror:
            for sseq, subject, headers, payload, _ts in batch:
                if sseq in source.copied_ahead:  # stored while an earlier copy was refused
                    source.copied_ahead.discard(sseq)
                    continue
                self.sourcing.copy_one(source, self.index, sseq, subject, headers, payload)
                source.next_seq = sseq + 1
            self._after_copy()
            return
        from_mirror = self.sourcing.mirror_batch(source, batch)
        if not from_mirror:
            source.next_seq = max(source.next_seq, batch[-1][0] + 1)
            self._after_copy()
            return
        self.in_flight_ns = self.ajs.now_ns()
        generation = self.generation

        def applied() -> None:
            self.in_flight_ns = 0
            if generation == self.generation and source.refused_seq:
                self.pause(source.retry_at_ns)  # read again from the refused message, after the delay
                return
            self._after_copy()

        try:
            self.sourcing.propose_mirror(source, from_mirror, applied)
        except (NotLeader, LimitExceeded, ProposalDropped) as error:
            LOG.info("mirror %s: copy not proposed (%s), read again", self.sourcing.stream.config.name, error)
            self.in_flight_ns = 0
            self.pause(self.ajs.now_ns() + int(limits.JS_SOURCE_POLL_MAX_S * NS))

    def _after_copy(self) -> None:
        if self.pending:
            if not self._flush_queued:
                self._flush_queued = True
                self.ajs.call_soon(self._flush)
            return
        self._answer_flow_control()

    def _answer_flow_control(self) -> None:
        if self.held_fc and not self.in_flight_ns and not self.pending and not self.closed:
            reply, self.held_fc = self.held_fc, b""
            self._send(reply.decode(), b"", "")

