"""`$JS.API.STREAM.SNAPSHOT.<stream>`: a stream backup streamed to the client, as nats-server 2.15.

The answer carries the stream's config and state; then the snapshot goes to the request's
`deliver_subject` in chunks of `chunk_size` (default 128 KiB, clamped to 1 KiB..1 MiB). Each full
chunk has the reply subject `$JS.SNAPSHOT.ACK.<stream>.<id>.<bytes>.<index>`; at most
`window_size / chunk_size` chunks (default window 8 MiB, clamped to 1 KiB..32 MiB) are unacked at
once, and any message to an ack subject frees one slot. A last short chunk goes without a reply,
then an empty message ends the snapshot: with the header `NATS/1.0 204` once a full chunk went
out (none when the whole snapshot fit one chunk), `408 No Interest` when the receiver went
away, `408 No Flow Response` after SNAPSHOT_ACK_TIMEOUT_S without a slot, `500 <error>` when
reading the stream failed.

The bytes are nats-server's v2 backup (store/archive.py) in S2 framing (store/s2frame.py). The
snapshot is produced lazily, a bounded batch of messages at a time, between state.json's
first_seq and last_seq (messages stored meanwhile are not in it; one deleted meanwhile is left
out), so memory stays bounded by the window whatever the stream's size.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from appliance.errors import ApplianceError
from appliance.jetstream import advisories, errors
from appliance.jetstream.api_streams import stream_info
from appliance.jetstream.decode import decode_object
from appliance.jetstream.request import Request, body_of, stream_of
from appliance.jetstream.wire import rfc3339
from appliance.protocol.subjects import is_valid_publish_subject
from appliance.store import archive, s2frame

if TYPE_CHECKING:
    from appliance.jetstream.consumer import Consumer
    from appliance.jetstream.host import Timer
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)

SNAPSHOT_FIELDS: dict[str, object] = {
    "deliver_subject": "str",
    "no_consumers": "bool",
    "chunk_size": "int",
    "window_size": "int",
    "jsck": "bool",
}
CHUNK_DEFAULT = 128 * 1024
WINDOW_DEFAULT = 8 * 1024 * 1024
SNAPSHOT_ACK_TIMEOUT_S = 5.0
INTEREST_WAIT_S = 2.0
INTEREST_POLL_S = 0.05
INTEREST_WATCH_S = 0.1
CHUNKS_PER_TURN = 16  # chunks sent per loop turn, so a big window does not hold the loop
BATCH_BYTES = 256 * 1024  # archive bytes produced per read of the store
HDR_DONE = b"NATS/1.0 204\r\n\r\n"
HDR_NO_INTEREST = b"NATS/1.0 408 No Interest\r\n\r\n"
HDR_NO_FLOW = b"NATS/1.0 408 No Flow Response\r\n\r\n"


def is_empty_request(body: bytes) -> bool:
    """nats-server's isEmptyRequest: nothing, or a JSON object without keys."""
    if not body:
        return True
    try:
        value = json.loads(body)
    except ValueError:
        return False
    return value == {}


def stream_snapshot(request: Request) -> None:
    body = body_of(request)
    if is_empty_request(body):
        raise errors.BAD_REQUEST.error()
    stream = stream_of(request, request.tokens[2])
    obj = decode_object(body, SNAPSHOT_FIELDS, "JSApiStreamSnapshotRequest")  # type: ignore[arg-type]
    deliver = str(obj.get("deliver_subject", ""))
    if not is_valid_publish_subject(deliver.encode()):
        raise errors.SNAPSHOT_DELIVER_SUBJECT_INVALID.error()
    chunk_size = int(str(obj.get("chunk_size", 0))) or CHUNK_DEFAULT
    window_size = int(str(obj.get("window_size", 0))) or WINDOW_DEFAULT
    chunk_size = min(max(1024, chunk_size), 1024 * 1024)
    window_size = max(min(max(1024, window_size), 32 * 1024 * 1024), chunk_size)
    info = stream_info(stream)
    consumers = [] if obj.get("no_consumers") else list(stream.consumers.values())
    ajs = request.ajs
    client = advisories.client_info(ajs, advisories.requester(ajs, request.reply))
    sender = SnapshotSender(ajs, stream, deliver, chunk_size, window_size // chunk_size, consumers, client)
    request.respond(
        "stream_snapshot_response",
        {"config": stream.config.to_json(dynamic_metadata=False), "state": info["state"]},
    )
    advise(ajs, "SNAPSHOT_CREATE", "snapshot_create", stream.config.name, {"state": info["state"], "client": client})
    logger.info("Starting snapshot for stream '%s > %s'", request.ajs.account.name, stream.config.name)
    sender.start()


def advise(ajs: AccountJetStream, event: str, kind: str, stream: str, fields: dict[str, object]) -> None:
    """`$JS.EVENT.ADVISORY.STREAM.<event>.<stream>` (snapshot and restore advisories)."""
    body: dict[str, object] = {"stream": stream, **fields}
    if ajs.domain:
        body["domain"] = ajs.domain
    if body.get("error") == "":
        del body["error"]
    advisories.publish(ajs, f"{advisories.PREFIX}.STREAM.{event}.{stream}", kind, body)


def consumer_state_json(consumer: Consumer, last_seq: int) -> dict[str, object]:
    """A consumer's state as nats-server's ConsumerState JSON, bounded by the snapshot's last
    sequence (as nats-server bounds it)."""
    state = consumer.state
    pending = {
        str(sseq): {"Sequence": cseq, "Timestamp": ts}
        for sseq, (cseq, ts) in sorted(state.pending.items())
        if sseq <= last_seq
    }
    # nats-server keeps redeliveries (delivery count - 1); appliance keeps the delivery count
    redelivered = {
        str(sseq): count - 1 for sseq, count in sorted(state.redelivered.items()) if sseq <= last_seq and count > 1
    }
    out: dict[str, object] = {
        "delivered": {"consumer_seq": state.delivered_cseq, "stream_seq": min(state.delivered_sseq, last_seq)},
        "ack_floor": {"consumer_seq": state.floor_cseq, "stream_seq": min(state.floor_sseq, last_seq)},
    }
    if pending:
        out["pending"] = pending
    if redelivered:
        out["redelivered"] = redelivered
    return out


def archive_parts(stream: Stream, state: dict[str, object], consumers: list[Consumer], now_ns: int) -> Iterator[bytes]:
    """The backup archive, produced a bounded batch at a time (module doc)."""
    first_seq = int(str(state["first_seq"]))
    last_seq = int(str(state["last_seq"]))
    head = dict(state)
    head["consumer_count"] = len(consumers)
    parts = [archive.MAGIC, archive.entry(archive.STATE_NAME, now_ns, 0, b"", _json(head))]
    for consumer in consumers:
        record = {"config": consumer.config.to_json(dynamic_metadata=False), "state": consumer_state_json(consumer, last_seq)}
        parts.append(archive.entry(archive.CONSUMER_PREFIX + consumer.name, now_ns, 0, b"", _json(record)))
    yield b"".join(parts)
    next_seq = max(first_seq, 1)
    while next_seq <= last_seq and not stream.deleted:
        batch: list[bytes] = []
        size = 0
        scan = stream.store.scan(next_seq)
        try:
            for msg in scan:
                if msg.seq > last_seq:
                    next_seq = last_seq + 1
                    break
                item = archive.entry(msg.subject, msg.timestamp_ns, msg.seq, msg.headers, msg.payload)
                batch.append(item)
                size += len(item)
                next_seq = msg.seq + 1
                if size >= BATCH_BYTES:
                    break
            else:
                next_seq = last_seq + 1
        finally:
            close = getattr(scan, "close", None)
            if close is not None:
                close()  # no iterator is held across loop turns: the store may change meanwhile
        if batch:
            yield b"".join(batch)
    if stream.deleted:
        raise ApplianceError("stream was deleted during the snapshot")
    yield archive.END


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class ChunkSource:
    """Reads the framed snapshot `size` bytes at a time."""

    def __init__(self, parts: Iterator[bytes]) -> None:
        self._parts = parts
        self._buffer = bytearray()
        self._first = True
        self._done = False
        self.total = 0

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and not self._done:
            part = next(self._parts, None)
            if part is None:
                self._done = True
                break
            self._buffer += s2frame.frame(part, first=self._first)
            self._first = False
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        self.total += len(out)
        return out


class SnapshotSender:
    """Sends one snapshot with nats-server's flow control (module doc)."""

    def __init__(
        self,
        ajs: AccountJetStream,
        stream: Stream,
        deliver: str,
        chunk_size: int,
        max_inflight: int,
        consumers: list[Consumer],
        client: dict[str, object],
    ) -> None:
        self.ajs = ajs
        self.client = client
        self.started_ns = ajs.now_ns()
        self.stream = stream
        self.deliver = deliver
        self.chunk_size = chunk_size
        self.max_inflight = max_inflight
        self.slots = max_inflight
        self.index = 1
        self.sent_full = False
        self.done = False
        state = stream_info(stream)["state"]
        assert isinstance(state, dict)
        self.source = ChunkSource(archive_parts(stream, state, consumers, ajs.now_ns()))
        self.ack_subject = f"$JS.SNAPSHOT.ACK.{stream.config.name}.{advisories.new_id(ajs.rng)}"
        self._ack_sub = ajs.client.subscribe(f"{self.ack_subject}.>".encode(), self._on_ack)
        self._timer: Timer | None = None
        self._scheduled = False
        self._waited_s = 0.0
        self._last_send_s = 0.0
        self._had_interest = False

    def start(self) -> None:
        self._timer = None
        self._had_interest = self.ajs.has_interest(self.deliver)
        if self._had_interest or self._waited_s >= INTEREST_WAIT_S:
            self._arm_ack_timer()
            self._pump()
            return
        self._waited_s += INTEREST_POLL_S  # nats-server allows about 2 s for interest to show up
        self._timer = self.ajs.call_later(INTEREST_POLL_S, self.start)

    def _on_ack(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if self.done:
            return
        self.slots = min(self.slots + 1, self.max_inflight)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self.done:
            self._scheduled = True
            self.ajs.call_soon(self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        if self.done:
            return
        if self.ajs.has_interest(self.deliver):
            self._had_interest = True
        elif self._had_interest:  # the receiver went away (never there: the ack timer ends it)
            self._finish(HDR_NO_INTEREST, "no interest")
            return
        sent = 0
        while self.slots > 0 and sent < CHUNKS_PER_TURN:
            try:
                data = self.source.read(self.chunk_size)
            except (ApplianceError, OSError) as exc:
                self._finish(f"NATS/1.0 500 {exc}\r\n\r\n".encode(), str(exc))
                return
            if len(data) < self.chunk_size:
                if data:
                    self.ajs.send(self.deliver, data)
                self._finish(HDR_DONE if self.sent_full else None, "")
                return
            self.ajs.send(self.deliver, data, reply=f"{self.ack_subject}.{len(data)}.{self.index}")
            self.index += 1
            self.slots -= 1
            self.sent_full = True
            sent += 1
            self._arm_ack_timer()
        if self.slots > 0:
            self._schedule()

    def _arm_ack_timer(self) -> None:
        """Each chunk sent restarts the ack deadline; one watch timer runs meanwhile."""
        self._last_send_s = self.ajs.clock.monotonic()
        if self._timer is None:
            self._timer = self.ajs.call_later(INTEREST_WATCH_S, self._watch)

    def _watch(self) -> None:
        """While chunks are out: the receiver going away ends the snapshot at once (nats-server
        is told by its sublist), no ack for SNAPSHOT_ACK_TIMEOUT_S ends it too."""
        self._timer = None
        if self.done:
            return
        if self._had_interest and not self.ajs.has_interest(self.deliver):
            self._finish(HDR_NO_INTEREST, "no interest")
        elif self.ajs.clock.monotonic() - self._last_send_s >= SNAPSHOT_ACK_TIMEOUT_S:
            self._finish(HDR_NO_FLOW, "no flow response")
        else:
            self._timer = self.ajs.call_later(INTEREST_WATCH_S, self._watch)

    def _finish(self, header: bytes | None, error: str) -> None:
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.ajs.client.unsubscribe(self._ack_sub)
        self.ajs.send(self.deliver, b"", header=header)
        fields = {"start": rfc3339(self.started_ns), "end": rfc3339(self.ajs.now_ns()), "client": self.client}
        advise(self.ajs, "SNAPSHOT_COMPLETE", "snapshot_complete", self.stream.config.name, {**fields, "error": error})
        name = f"'{self.ajs.account.name} > {self.stream.config.name}'"
        if error:
            logger.warning("Snapshot for stream %s failed: %s", name, error)
        else:
            logger.info("Completed snapshot of %d bytes for stream %s", self.source.total, name)
