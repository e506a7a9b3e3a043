"""RouteCatchUp: a lagging stream replica fetches the leader's stored messages over the routes.

A replica that installs its leader's snapshot (a stream's position: first/last sequence) holds a
store that lacks the messages the snapshot stands for. It asks for them, one bounded batch at a
time, on internal subjects of the system account under our own prefix (as RAFT: $ARAFT):

    request:  $ACATCHUP.<leader peer>.<group>.<own peer>      reply to  $ACATCHUPR.<own peer>.<group>.<n>

The payloads are those of cluster/catch_up_codec.py. Each worker that runs clustered JetStream has
one RouteCatchUp (RaftHost builds it): it subscribes both prefixes for its own peer id, so the
interest crosses every route like any subscription.

Serving: the request names a group; the group registered in the worker's GroupRegistry is asked
through its state machine, if that machine is a CatchUpProvider (a replicated Stream). A replica
answers only a range it holds in full (`catch_up_batch` returns None otherwise: UNAVAILABLE), so
an answer from a replica that lost leadership is still right. A batch is bounded by the
requester's max_msgs and max_bytes, by JS_CATCHUP_BATCH_MSGS and by this server's
JS_CATCHUP_BATCH_BYTES / max_payload; a message too large for one reply goes in parts.
A reply whose route is congested is not sent: the requester times out and asks again.

Fetching (`source(group_id)`: a jetstream CatchUpSource): one request in flight per group (flow
control: the stream asks for the next batch only once the previous one was stored), a timeout
(JS_CATCHUP_TIMEOUT_S), and every answer checked: a reply for an older request (its nonce) is
dropped; one that does not decode or names sequences outside the range fails the fetch with
done(None), never an exception. `done` always runs on the loop (scheduler.call_soon), never
inside the route's read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from appliance import limits
from appliance.cluster.catch_up_codec import (
    PART_HEAD_BYTES,
    REPLY_HEAD_BYTES,
    Part,
    Request,
    Status,
    decode_reply,
    decode_request,
    encode_msgs,
    encode_part,
    encode_request,
    encode_unavailable,
    msg_bytes,
)
from appliance.cluster.group import Scheduler, Timer
from appliance.cluster.registry import GroupRegistry
from appliance.cluster.route_transport import is_subject_token, system_account
from appliance.errors import CorruptData
from appliance.server.internal import InternalClient
from appliance.server.routes import RoutePeer
from appliance.server.server import Server
from appliance.store.api import StoredMsg

logger = logging.getLogger(__name__)

REQUEST_PREFIX = b"$ACATCHUP."
REPLY_PREFIX = b"$ACATCHUPR."
Done = Callable[[list[StoredMsg] | None], None]


@runtime_checkable
class CatchUpProvider(Protocol):
    """A group's state machine that can serve its stored messages (a replicated stream)."""

    def catch_up_batch(
        self, from_seq: int, to_seq: int, max_msgs: int, max_bytes: int
    ) -> list[StoredMsg] | None:
        """Stored messages in [from_seq, to_seq], ascending: at most max_msgs, and stopping before
        their subject + headers + payload bytes pass max_bytes, but at least one if there is one.
        [] when none is left in the range; None when this replica does not hold the whole range."""
        ...


@dataclass(slots=True)
class _Fetch:
    """The one request in flight for a group."""

    leader: str
    from_seq: int
    to_seq: int
    done: Done
    nonce: int = 0
    timer: Timer | None = None
    part: bytearray = field(default_factory=bytearray)  # a large message assembled so far
    part_head: Part | None = None


class RouteCatchUp:
    def __init__(self, server: Server, own_peer: str, scheduler: Scheduler, *,
                 timeout_s: float = limits.JS_CATCHUP_TIMEOUT_S,
                 batch_bytes: int = limits.JS_CATCHUP_BATCH_BYTES) -> None:
        if not is_subject_token(own_peer):
            raise ValueError(f"peer id {own_peer!r} is not a subject token")
        self.server = server
        self.own_peer = own_peer
        self.scheduler = scheduler
        self.timeout_s = timeout_s
        # what one reply may carry, encoded: never above the routes' max_payload
        self.reply_bytes_max = min(batch_bytes, server.options.max_payload)
        assert self.reply_bytes_max > PART_HEAD_BYTES
        self.account = system_account(server)
        self.client = InternalClient(server, self.account, "stream catch-up")
        self.registry: GroupRegistry | None = None
        self._fetches: dict[str, _Fetch] = {}
        self._nonce = 0
        self.served = 0  # replies sent
        self.served_bytes = 0
        self.reply_bytes_largest = 0
        self.requested = 0  # requests sent
        self.timeouts = 0
        self.superseded = 0  # fetches replaced by a newer one of the same group
        self.parts_received = 0  # pieces of messages too large for one reply
        self.dropped_stale = 0  # replies to a request no longer in flight
        self.dropped_corrupt = 0  # replies or requests that did not decode or were out of range
        self.dropped_congested = 0  # replies not sent: the route back was over its high-water mark
        own = own_peer.encode()
        self.client.subscribe(REPLY_PREFIX + own + b".>", self._on_reply)

    def serve(self, registry: GroupRegistry) -> None:
        """Answer requests for the groups of `registry` (the worker's, which owns the streams)."""
        assert self.registry is None
        self.registry = registry
        self.client.subscribe(REQUEST_PREFIX + self.own_peer.encode() + b".>", self._on_request)

    def close(self) -> None:
        for fetch in self._fetches.values():
            if fetch.timer is not None:
                fetch.timer.cancel()
        self._fetches.clear()
        self.client.close()

    def in_flight(self) -> int:
        return len(self._fetches)

    # --- serving ----------------------------------------------------------------------------------

    def _on_request(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        tokens = subject.split(b".")
        if len(tokens) != 4 or not reply or self.registry is None:
            self.dropped_corrupt += 1
            return
        try:
            request = decode_request(data[len(header):] if header is not None else data)
        except CorruptData as exc:
            self.dropped_corrupt += 1
            logger.debug("bad catch-up request on %r: %s", subject, exc)
            return
        group = self.registry.get(tokens[2].decode(errors="replace"))
        machine = group.state_machine if group is not None else None
        if isinstance(machine, CatchUpProvider):
            answer = self._answer(machine, request)
        else:
            answer = encode_unavailable()
        self._send_reply(reply, answer)

    def _answer(self, provider: CatchUpProvider, request: Request) -> bytes:
        budget = min(request.max_bytes, self.reply_bytes_max)
        max_msgs = min(request.max_msgs, limits.JS_CATCHUP_BATCH_MSGS)
        msgs = provider.catch_up_batch(request.from_seq, request.to_seq, max_msgs, budget)
        if msgs is None:
            return encode_unavailable()
        size = REPLY_HEAD_BYTES
        fit = 0
        for msg in msgs:
            size += msg_bytes(msg)
            if size > budget:
                break
            fit += 1
        if fit or not msgs:
            return encode_msgs(msgs[:fit])
        first = msgs[0]  # alone larger than one reply: sent in parts, one per request
        offset = request.part_offset if first.seq == request.from_seq else 0
        room = budget - PART_HEAD_BYTES - len(first.subject.encode())
        body_len = len(first.headers) + len(first.payload)
        if room <= 0 or offset >= body_len:
            return encode_unavailable()
        chunk = (first.headers + first.payload)[offset : offset + room]
        return encode_part(Part(first.seq, first.timestamp_ns, first.subject, len(first.headers),
                                len(first.payload), offset, chunk))

    def _send_reply(self, reply: bytes, answer: bytes) -> None:
        plain, _ = self.account.sublist.match(reply)
        if any(isinstance(sub.conn, RoutePeer) and sub.conn.congested for sub in plain):
            self.dropped_congested += 1
            return
        self.client.publish(reply, answer)
        self.served += 1
        self.served_bytes += len(answer)
        self.reply_bytes_largest = max(self.reply_bytes_largest, len(answer))

    # --- fetching ---------------------------------------------------------------------------------

    def source(self, group_id: str) -> GroupCatchUp:
        """The CatchUpSource of one group (a replicated stream's Replication.catch_up)."""
        if not is_subject_token(group_id):
            raise ValueError(f"group {group_id!r} is not a subject token")
        return GroupCatchUp(self, group_id)

    def fetch(self, group_id: str, leader: str, from_seq: int, to_seq: int, done: Done) -> None:
        """Ask `leader` for one batch of group_id's messages in [from_seq, to_seq]; done(batch) or
        done(None) later, on the loop. One request per group: a new fetch supersedes one still in
        flight (its stream was deleted and made again), whose done is never called."""
        assert 0 < from_seq <= to_seq
        previous = self._fetches.pop(group_id, None)
        if previous is not None:
            if previous.timer is not None:
                previous.timer.cancel()
            self.superseded += 1
        if not leader or leader == self.own_peer or not is_subject_token(leader):
            self.scheduler.call_soon(lambda: done(None))  # no leader known (yet): asked again later
            return
        fetch = _Fetch(leader, from_seq, to_seq, done)
        self._fetches[group_id] = fetch
        self._send_request(group_id, fetch)

    def _send_request(self, group_id: str, fetch: _Fetch) -> None:
        self._nonce += 1
        fetch.nonce = self._nonce
        request = Request(fetch.from_seq, fetch.to_seq, limits.JS_CATCHUP_BATCH_MSGS, self.reply_bytes_max,
                          part_offset=len(fetch.part))
        leader, group, own = fetch.leader.encode(), group_id.encode(), self.own_peer.encode()
        subject = b"%s%s.%s.%s" % (REQUEST_PREFIX, leader, group, own)
        reply = b"%s%s.%s.%d" % (REPLY_PREFIX, own, group, fetch.nonce)
        self.requested += 1
        if not self.client.publish(subject, encode_request(request), reply=reply):
            self._finish(group_id, None)  # nobody interested: the leader is unreachable
            return
        nonce = fetch.nonce
        fetch.timer = self.scheduler.call_later(self.timeout_s, lambda: self._timed_out(group_id, nonce))

    def _timed_out(self, group_id: str, nonce: int) -> None:
        fetch = self._fetches.get(group_id)
        if fetch is None or fetch.nonce != nonce:
            return
        fetch.timer = None
        self.timeouts += 1
        self._finish(group_id, None)

    def _finish(self, group_id: str, result: list[StoredMsg] | None) -> None:
        fetch = self._fetches.pop(group_id)
        if fetch.timer is not None:
            fetch.timer.cancel()
            fetch.timer = None
        done = fetch.done
        self.scheduler.call_soon(lambda: done(result))

    def _on_reply(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        tokens = subject.split(b".")
        group_id = tokens[2].decode(errors="replace") if len(tokens) == 4 else ""
        fetch = self._fetches.get(group_id)
        if fetch is None or tokens[3] != b"%d" % fetch.nonce:
            self.dropped_stale += 1
            return
        if fetch.timer is not None:
            fetch.timer.cancel()
            fetch.timer = None
        try:
            answer = decode_reply(data[len(header):] if header is not None else data)
            result = self._take(fetch, answer.status, list(answer.msgs), answer.part)
        except CorruptData as exc:
            self.dropped_corrupt += 1
            logger.warning("stream group %s: bad catch-up reply from %s: %s", group_id, fetch.leader, exc)
            self._finish(group_id, None)
            return
        if result is _MORE:
            self._send_request(group_id, fetch)  # the next part of a large message
            return
        assert result is None or isinstance(result, list)
        self._finish(group_id, result)

    def _take(self, fetch: _Fetch, status: Status, msgs: list[StoredMsg], part: Part | None
              ) -> list[StoredMsg] | None | object:
        """The batch to hand over, None (unavailable: ask again later), or _MORE (a part came)."""
        if status == Status.UNAVAILABLE:
            return None
        if status == Status.MSGS:
            if len(msgs) > limits.JS_CATCHUP_BATCH_MSGS:
                raise CorruptData(f"{len(msgs)} messages in one catch-up batch")
            if msgs and not (fetch.from_seq <= msgs[0].seq and msgs[-1].seq <= fetch.to_seq):
                raise CorruptData(f"catch-up batch {msgs[0].seq}..{msgs[-1].seq} outside the range asked")
            return msgs
        assert part is not None
        return self._take_part(fetch, part)

    def _take_part(self, fetch: _Fetch, part: Part) -> list[StoredMsg] | object:
        total = part.headers_len + part.payload_len
        if part.seq < fetch.from_seq or part.seq > fetch.to_seq or total > limits.STORE_RECORD_BYTES_MAX:
            raise CorruptData(f"catch-up part of message {part.seq} ({total} bytes) outside the range asked")
        head = fetch.part_head
        if head is None or (head.seq, head.headers_len, head.payload_len) != (part.seq, part.headers_len,
                                                                               part.payload_len):
            fetch.part.clear()  # a new message (the one asked for went away): start over
            fetch.part_head = part
            fetch.from_seq = part.seq
        if part.offset != len(fetch.part):
            raise CorruptData(f"catch-up part at {part.offset}, expected {len(fetch.part)}")
        fetch.part += part.chunk
        self.parts_received += 1
        if len(fetch.part) < total:
            return _MORE
        body = bytes(fetch.part)
        fetch.part.clear()
        fetch.part_head = None
        return [StoredMsg(part.seq, part.subject, body[: part.headers_len], body[part.headers_len :],
                          part.timestamp_ns)]


_MORE = object()


class GroupCatchUp:
    """A jetstream CatchUpSource bound to one group id."""

    def __init__(self, catch_up: RouteCatchUp, group_id: str) -> None:
        self.catch_up = catch_up
        self.group_id = group_id

    def fetch(self, leader: str, from_seq: int, to_seq: int, done: Done) -> None:
        self.catch_up.fetch(self.group_id, leader, from_seq, to_seq, done)
