"""Sibling workers as seen by one worker's router: interest propagation and message forwarding.

Theory of operation. Each sibling worker is a `LinkPeer`: to the router it is one more
subscriber (its subscriptions stand for the sibling's interest, inserted in this worker's
sublists) and `deliver()` turns a message into a MESSAGE frame on the link. The sublist lists a
link at most once among the plain subscribers of a subject, so a message crosses a link once for
all of the sibling's plain subscriptions; the frame says "plain" and the sibling delivers it to
its local plain subscribers. A queue group picks among local members and the sibling's members
(one remote entry per remote member, so the pick stays uniform); when a remote member wins, the
frame names the queue and the sibling gives it to one of its local members of that group.
Messages cross one link at most: what arrives from a sibling is delivered locally only.

Interest: a worker tells every sibling about its subscriptions — plain ones reference-counted
per (account, subject), so a sibling holds one entry per subject; queue ones one by one. On start
a worker sends HELLO; a worker receiving HELLO forgets what it knew of that sibling and answers
INTEREST_RESET followed by its whole interest and INTEREST_SYNCED, so the sibling replaces (never
duplicates) what it held. That is how a restarted worker learns the mesh, and the mesh forgets the
dead one. The interest gate (fabric/sync.py) builds nats-server's promise on it: a PONG waits until
every live sibling acknowledged our interest changes, and a client's first read waits until we know
every live sibling's interest; only a sibling whose process is gone (pidfd) is not waited for.

Hot path, in runs: a client's read usually holds a burst of PUBs on one subject. When the only
subscriber of that subject here is a sibling, the whole run becomes records in one C call
(`append_pub_records`, via `deliver_pubs`), flushed as one MESSAGE frame per read (or per
LINK_RECORDS_FLUSH_BYTES). The receiving worker splits a frame into runs of records with the same
account, subject and queue (`record_runs`), matches each plain run once, and appends the whole run
as MSG/HMSG lines straight into each local subscriber's output (`append_msgs`, via
`ClientConnection.deliver_run`); internal clients and clients with permissions get the records one
by one through `deliver`, queue records pick a member each. Every native function has a Python twin
here (differential property tests in tests/server/test_link_runs.py).

Backpressure: a full link is never a dropped frame. The frame waits in the peer's backlog and the
connection whose message filled it stops reading until the link drains.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from appliance import limits, native
from appliance.errors import ApplianceError, ClosedError, LimitExceeded
from appliance.fabric.drain_watch import DrainWatch
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link, LinkLoop, handler_failed
from appliance.fabric.liveness import Liveness, PidfdLiveness
from appliance.fabric.sync import SiblingSync, decode_pid, encode_pid
from appliance.log import ContainedErrors
from appliance.protocol import wire
from appliance.protocol.client_parser import OP_PUB, Event
from appliance.server.accounts import Account
from appliance.server.router import pick
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.server.client import ClientConnection
    from appliance.server.server import Server

logger = logging.getLogger(__name__)
FRAME_ERRORS = ContainedErrors(logger)  # frames from siblings whose handling raised (dropped one by one)
GATHER_WARNING_QUIET_S = 10.0  # at most one warning this often about siblings slow to answer monitoring

_RECORD = struct.Struct("<HHHHII")  # account, subject, reply, queue lengths; header length or NO_HEADER; data
_RECORD_NAMES = struct.Struct("<HH")  # the first two fields of _RECORD: account and subject lengths
_INTEREST = struct.Struct("<HHH")  # account, subject, queue lengths
NO_HEADER = 0xFFFFFFFF
# Consumer deliveries relayed to a sibling worker (appliance/jetstream/relay.py owns the format):
# subject `$JSD.<deliver subject>` (`$JSDQ.` for one member of a queue group), reply
# `<ack>@<stream subject>[@<queue>]`. The route holder relays a remote consumer's deliveries so too
# (server/routes.py), since the route's `RMSG <deliver subject> <ack>@<stream subject>` is that reply.
RELAY_PREFIX = b"$JSD."
RELAY_QUEUE_PREFIX = b"$JSDQ."
KIND_HELLO = int(FrameKind.HELLO)
KIND_INTEREST_ADD = int(FrameKind.INTEREST_ADD)
KIND_INTEREST_REMOVE = int(FrameKind.INTEREST_REMOVE)
KIND_MESSAGE = int(FrameKind.MESSAGE)
KIND_INTEREST_RESET = int(FrameKind.INTEREST_RESET)
KIND_MONITOR_REQUEST = int(FrameKind.MONITOR_REQUEST)
KIND_MONITOR_REPLY = int(FrameKind.MONITOR_REPLY)
KIND_INTEREST_ACK = int(FrameKind.INTEREST_ACK)
KIND_INTEREST_SYNCED = int(FrameKind.INTEREST_SYNCED)
_SEQ = struct.Struct("<Q")  # interest frames start with the sender's interest sequence number


def append_record_py(out: bytearray, account: bytes, subject: bytes, reply: bytes | None, queue: bytes | None,
                     header_size: int, data: bytes) -> None:
    """One message as a record of a MESSAGE frame (header_size -1: no headers); a frame carries one or
    more records. Twin of the native append_record."""
    out += _RECORD.pack(len(account), len(subject), len(reply) if reply else 0, len(queue) if queue else 0,
                        NO_HEADER if header_size < 0 else header_size, len(data))
    out += account
    out += subject
    if reply:
        out += reply
    if queue:
        out += queue
    out += data


Record = tuple[bytes, bytes, bytes | None, bytes | None, bytes | None, bytes]


def _read_record(payload: bytes, pos: int, end: int) -> tuple[Record, int]:
    """The record at payload[pos:end] and the position after it; ValueError when malformed."""
    if end - pos < _RECORD.size:
        raise ValueError("truncated message record in a link frame")
    a, s, r, q, h, d = _RECORD.unpack_from(payload, pos)
    pos += _RECORD.size
    if end - pos < a + s + r + q + d:
        raise ValueError("truncated message record in a link frame")
    if h != NO_HEADER and h > d:
        raise ValueError("message record header longer than its data")
    account = payload[pos : pos + a]
    pos += a
    subject = payload[pos : pos + s]
    pos += s
    reply = payload[pos : pos + r] if r else None
    pos += r
    queue = payload[pos : pos + q] if q else None
    pos += q
    data = payload[pos : pos + d]
    return (account, subject, reply, queue, None if h == NO_HEADER else data[:h], data), pos + d


def decode_records_py(payload: bytes) -> list[Record]:
    """(account, subject, reply, queue, header, data) per record; data includes the header block, as HMSG.
    Twin of the native decode_records; a malformed payload raises ValueError."""
    records = []
    pos = 0
    end = len(payload)
    while pos < end:
        record, pos = _read_record(payload, pos, end)
        records.append(record)
    return records


def record_subject(payload: bytes, pos: int) -> bytes:
    """The subject of the record at payload[pos] (a run's subject, for a run handler); ValueError
    when the record is cut."""
    if len(payload) - pos < _RECORD.size:
        raise ValueError("truncated message record in a link frame")
    a, s = _RECORD_NAMES.unpack_from(payload, pos)
    start = pos + _RECORD.size + a
    if len(payload) < start + s:
        raise ValueError("truncated message record in a link frame")
    return payload[start : start + s]


def record_runs_py(payload: bytes) -> list[tuple[bytes, bytes, bytes | None, int, int, int]]:
    """(account, subject, queue, start, end, count) per run of consecutive records with the same
    account, subject and queue: the unit the receiving worker matches and delivers at once.
    Twin of the native record_runs; a malformed payload raises ValueError."""
    runs: list[tuple[bytes, bytes, bytes | None, int, int, int]] = []
    pos = 0
    end = len(payload)
    while pos < end:
        (account, subject, _, queue, _, _), after = _read_record(payload, pos, end)
        if runs and runs[-1][:3] == (account, subject, queue):
            runs[-1] = (account, subject, queue, runs[-1][3], after, runs[-1][5] + 1)
        else:
            runs.append((account, subject, queue, pos, after, 1))
        pos = after
    return runs


def append_msgs_py(out: bytearray, payload: bytes, start: int, end: int, tail: bytes, headers: bool,
                   limit: int) -> tuple[int, int, int]:
    """MSG/HMSG lines (as wire.append_msg) for up to `limit` records of payload[start:end]; a client
    without headers gets the payload alone. Returns (count, position after the last record used,
    payload bytes written). Twin of the native append_msgs; nothing is appended when a record of
    the range is malformed (ValueError)."""
    if not 0 <= start <= end <= len(payload):
        raise ValueError("append_msgs: bad range")
    records = []
    pos = start
    while pos < end and len(records) < limit:
        record, pos = _read_record(payload, pos, end)
        records.append(record)
    data_bytes = 0
    for _, subject, reply, _, header, data in records:
        if header is not None and not headers:
            data = data[len(header):]
            header = None
        wire.append_msg(out, subject, tail, reply, -1 if header is None else len(header), data)
        data_bytes += len(data)
    return len(records), pos, data_bytes


def append_relayed_msgs_py(out: bytearray, payload: bytes, start: int, end: int, tail: bytes, headers: bool,
                           limit: int) -> tuple[int, int, int]:
    """As append_msgs_py for records JetStream relayed to this worker (appliance/jetstream/relay.py):
    each record's reply `<ack>@<stream subject>` is split at its last '@' and the MSG/HMSG goes out
    on the stream subject with the ack as its reply (none when the ack is empty); the record's own
    subject (`$JSD.<inbox>`) is not written. Twin of the native append_relayed_msgs; nothing is
    appended when a record of the range is malformed or has no '@' or no stream subject (ValueError)."""
    if not 0 <= start <= end <= len(payload):
        raise ValueError("append_relayed_msgs: bad range")
    records = []
    pos = start
    while pos < end and len(records) < limit:
        record, pos = _read_record(payload, pos, end)
        ack, at, subject = (record[2] or b"").rpartition(b"@")
        if not at or not subject:
            raise ValueError("relayed record without an <ack>@<subject> reply")
        records.append((subject, ack, record[4], record[5]))
    data_bytes = 0
    for subject, ack, header, data in records:
        if header is not None and not headers:
            data = data[len(header):]
            header = None
        wire.append_msg(out, subject, tail, ack or None, -1 if header is None else len(header), data)
        data_bytes += len(data)
    return len(records), pos, data_bytes


def append_pub_records_py(out: bytearray, events: list[Event], start: int, account: bytes, subject: bytes,
                          bytes_max: int) -> tuple[int, int]:
    """One record per plain PUB event (op 1) from events[start] on, while the subject stays `subject`
    and `out` holds fewer than bytes_max bytes: the publishing worker's burst to one sibling.
    Returns (events used, payload bytes). Twin of the native append_pub_records."""
    count = 0
    data_bytes = 0
    for event in events[start:]:
        if len(out) >= bytes_max or len(event) != 4 or event[0] != OP_PUB or event[1] != subject:
            break
        reply, data = event[2], event[3]
        if reply is not None and len(reply) > 0xFFFF:
            break
        append_record_py(out, account, subject, reply, None, -1, data)
        count += 1
        data_bytes += len(data)
    return count, data_bytes


if native.ENABLED:
    append_record = native.speedups.append_record
    decode_records = native.speedups.decode_records
    record_runs = native.speedups.record_runs
    append_msgs = native.speedups.append_msgs
    append_relayed_msgs = native.speedups.append_relayed_msgs
    append_pub_records = native.speedups.append_pub_records
else:
    append_record = append_record_py
    decode_records = decode_records_py
    record_runs = record_runs_py
    append_msgs = append_msgs_py
    append_relayed_msgs = append_relayed_msgs_py
    append_pub_records = append_pub_records_py


def encode_interest(account: bytes, subject: bytes, queue: bytes | None) -> bytes:
    queue = queue or b""
    return _INTEREST.pack(len(account), len(subject), len(queue)) + account + subject + queue


def decode_interest(payload: bytes) -> tuple[bytes, bytes, bytes | None]:
    a, s, q = _INTEREST.unpack_from(payload, 0)
    pos = _INTEREST.size
    return payload[pos : pos + a], payload[pos + a : pos + a + s], payload[pos + a + s : pos + a + s + q] or None


class LinkPeer:
    """A sibling worker: a subscriber in this worker's sublists and the sink of frames to it."""

    is_link = True
    is_route = False  # a sibling worker on this host (server/routes.py has the routes to other hosts)

    def __init__(self, fabric: LocalFabric, link: Link) -> None:
        self.fabric = fabric
        self.link = link
        self.index = link.peer
        self.cid = -(1 << 30) - link.peer  # shows in monitoring as an internal connection
        self.closed = False
        self.backlog: deque[tuple[int, bytes | bytearray]] = deque()
        self.backlog_bytes = 0
        self.stalled: dict[ClientConnection, None] = {}
        # the sibling's interest: (account, subject, queue) -> its subscriptions here
        self.interest: dict[tuple[bytes, bytes, bytes | None], list[Subscription]] = {}
        self.msgs_out = 0
        self.msgs_in = 0
        self._records = bytearray()
        self._records_flush_bytes = min(limits.LINK_RECORDS_FLUSH_BYTES, link.frame_bytes_max // 2)
        self._records_pipeline_bytes = min(limits.LINK_RECORDS_PIPELINE_BYTES, self._records_flush_bytes)
        self._dirty = False
        self.receiving_paused = False
        self.seen_seq = 0  # the sibling's interest changes we have applied
        self.batches_in = 0  # batches of frames taken from the link (the drain watch's progress)
        self.drain_watch = DrainWatch(limits.LINK_STUCK_S)
        self._account_names: dict[str, bytes] = {}

    def deliver_pubs(self, sub: Subscription, events: list[Event], start: int) -> tuple[int, int]:
        """The publishing worker's burst: the PUB events from events[start] on with the same subject
        (all bound for this sibling alone) become records in one C call. Returns (events used, payload
        bytes); 0 events when none could be taken this way (the caller delivers one by one)."""
        account = self._account_names.get(sub.account)
        if account is None:
            account = self._account_names[sub.account] = sub.account.encode()
        records = self._records
        count, data_bytes = append_pub_records(records, events, start, account, events[start][1],
                                               self._records_flush_bytes)
        if count:
            self.msgs_out += count
            if len(records) >= self._records_flush_bytes:
                self.flush()
            elif not self._dirty:
                self._dirty = True
                self.fabric.server.dirty.append(self)  # type: ignore[arg-type]
        return count, data_bytes

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        """Add the message to the records going out; they leave as one frame when the server flushes
        (once per read of a client, like client writes) or when LINK_RECORDS_PIPELINE_BYTES have
        gathered: a long run of single deliveries (a pull request's batch relayed by JetStream)
        reaches the sibling in pieces it works on while this worker produces the rest."""
        account = self._account_names.get(sub.account)
        if account is None:
            account = self._account_names[sub.account] = sub.account.encode()
        self.msgs_out += 1
        records = self._records
        # a frame leaves before a message's first record, never between its plain record and its queue
        # records: the route holder merges them into one RMSG (server/routes.py), and a peer delivers
        # each RMSG to its plain subscribers
        queue = sub.queue
        if len(records) >= (self._records_pipeline_bytes if queue is None else self._records_flush_bytes):
            self.flush()
            records = self._records
        append_record(records, account, subject, reply, queue, -1 if header is None else len(header), data)
        if not self._dirty:
            self._dirty = True
            self.fabric.server.dirty.append(self)  # type: ignore[arg-type]

    def deliverer(
        self, sub: Subscription, subject: bytes, pipeline_bytes: int = limits.LINK_RECORDS_PIPELINE_BYTES
    ) -> Callable[[bytes | None, int, bytes], None]:
        """`deliver` bound to one of this sibling's subscriptions and one subject, for a run of messages
        made in one call (a pull request's batch relayed by JetStream): (reply, header_size or -1,
        data with the header block) per message; a frame leaves each `pipeline_bytes` (at most
        LINK_RECORDS_FLUSH_BYTES), the rest when the server flushes, on the next loop turn at the latest."""
        account = self._account_names.get(sub.account)
        if account is None:
            account = self._account_names[sub.account] = sub.account.encode()
        queue = sub.queue
        pipeline_bytes = min(pipeline_bytes, self._records_flush_bytes)
        server = self.fabric.server

        def deliver_one(reply: bytes | None, header_size: int, data: bytes) -> None:
            records = self._records
            append_record(records, account, subject, reply, queue, header_size, data)
            self.msgs_out += 1
            if len(records) >= pipeline_bytes:
                self.flush()
            elif not self._dirty:
                self._dirty = True
                server.dirty.append(self)  # type: ignore[arg-type]
                server.schedule_flush()

        return deliver_one

    def flush(self) -> None:
        self._dirty = False
        if self._records:
            # the frame leaves as the bytearray itself (the ring copies it; a backlog keeps it whole)
            payload, self._records = self._records, bytearray()
            if len(payload) > self.link.frame_bytes_max:
                raise LimitExceeded(f"a message of {len(payload)} bytes does not fit a link frame")
            self.send(KIND_MESSAGE, payload)
            if not self.closed and not self.backlog:
                self.link.flush()  # toward the sibling now (a socketpair link would wait for the turn's end)

    def send(self, kind: int, payload: bytes | bytearray) -> None:
        if self.closed:
            return
        try:
            if not self.backlog and self.link.try_send(kind, payload):
                return
        except ClosedError:
            self.closed = True  # we are shutting down: nothing more goes to this sibling
            return
        if self.backlog_bytes + len(payload) > limits.LINK_BACKLOG_BYTES_MAX:
            raise LimitExceeded(f"link to worker {self.index}: backlog over {limits.LINK_BACKLOG_BYTES_MAX} bytes")
        self.backlog.append((kind, payload))
        self.backlog_bytes += len(payload)
        producer = self.fabric.server.producer
        if producer is not None and len(self.stalled) < limits.STALLED_PRODUCERS_MAX:
            self.stalled[producer] = None
            producer.pause_for_backpressure()

    def drain(self) -> None:
        """The link has room again: send the backlog, then let stalled producers read again."""
        backlog = self.backlog
        while backlog:
            kind, payload = backlog[0]
            if not self.link.try_send(kind, payload):
                return
            backlog.popleft()
            self.backlog_bytes -= len(payload)
        stalled, self.stalled = self.stalled, {}
        for producer in stalled:
            producer.resume_after_backpressure()

    # --- as a producer: a local subscriber it delivers to may be full --------------------------------

    def pause_for_backpressure(self) -> None:
        if not self.receiving_paused:
            self.receiving_paused = True
            self.link.pause_receiving()

    def resume_after_backpressure(self) -> None:
        if self.receiving_paused and not self.closed:
            self.receiving_paused = False
            self.link.resume_receiving()

    def forget_interest(self) -> None:
        for (account_name, _, _), subs in self.interest.items():
            account = self.fabric.server.accounts.get(account_name.decode())
            if account is not None:
                for sub in subs:
                    account.sublist.remove(sub)
                    self.fabric.tell_sibling_interest(account, sub, False)
        self.interest.clear()


class FabricLoop(LinkLoop, Protocol):
    """What the fabric needs of its event loop: the links' part, and a timer (asyncio loops qualify)."""

    def call_later(self, delay: float, callback: Callable[[], object], /) -> SyncTimer: ...


class SyncTimer(Protocol):
    def cancel(self) -> None: ...


class LocalFabric:
    """This worker's links to its siblings; implements the fabric's LinkHandler."""

    def __init__(self, server: Server, links: dict[int, Link], *, sequence_base: int | None = None,
                 pid: int | None = None, liveness: Liveness | None = None) -> None:
        """`sequence_base` starts this incarnation's interest and request numbers above those of any
        earlier incarnation of this worker (default: the system-wide monotonic clock in ns), so frames
        the previous process left in a ring (an ACK, a reply) can never be taken for answers to ours.
        `pid` is this worker's process id as siblings see it (default: os.getpid()); `liveness` tells
        whether a sibling's process is alive (default: pidfds on the loop given to start())."""
        base = time.monotonic_ns() if sequence_base is None else sequence_base
        self.server = server
        self.peers = {index: LinkPeer(self, link) for index, link in links.items()}
        self._by_link = {id(peer.link): peer for peer in self.peers.values()}
        self._plain_refs: dict[tuple[str, bytes], int] = {}
        self._accounts: dict[bytes, Account] = {}
        self._next_sid = 0
        # told of each sibling subscription inserted or removed here (the routes advertise the host's interest)
        self.sibling_interest_listeners: list[Callable[[Account, Subscription, bool], None]] = []
        server.account_listeners.append(self.accounts_changed)
        # interest sync (fabric/sync.py): PONGs wait for live siblings' ACKs; first reads for their interest
        self.sync = SiblingSync(self.peers, base)
        self.pid = os.getpid() if pid is None else pid
        self._liveness = liveness
        self._loop: FabricLoop | None = None
        self._sync_timer: SyncTimer | None = None
        # monitoring across workers: this worker's snapshot, and replies awaited from siblings
        # (frame_bytes_max, parts wanted) -> this worker's snapshot; parts: see server/monitor/endpoint.py
        self.snapshot_provider: Callable[[int, frozenset[str]], dict[str, object]] | None = None
        self._next_request = base
        self._gather_timeouts = 0
        self._gather_warned_mono_s = float("-inf")
        self._awaiting: dict[int, tuple[asyncio.Future[list[dict[str, object]]], dict[int, dict[str, object]]]] = {}

    def start(self, loop: FabricLoop) -> None:
        self._loop = loop
        if self._liveness is None:
            self._liveness = PidfdLiveness(loop)
        self.server.interest_listeners.append(self.on_local_interest)
        self.server.interest_gate = self
        self.server.before_client_read = self.poll
        hello = encode_pid(self.pid)
        for peer in self.peers.values():
            peer.link.start(loop, self)
            peer.send(KIND_HELLO, hello)

    def close(self) -> None:
        if self.server.before_client_read == self.poll:
            self.server.before_client_read = None
        for peer in self.peers.values():
            peer.closed = True
            peer.link.close()
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self._liveness is not None:
            self._liveness.close()

    @property
    def interest_seq(self) -> int:
        """The number of our latest interest change sent to siblings."""
        return self.sync.seq

    def poll(self) -> None:
        """Take what siblings already sent, before a client's bytes are handled: an interest change a
        sibling made before this client's message arrived applies first, whatever order the event
        loop would wake us in."""
        for peer in self.peers.values():
            if not peer.closed and not peer.receiving_paused:
                try:
                    frames = peer.link.receive()
                except ApplianceError as error:
                    self.on_broken(peer.link, error)
                    continue
                if frames:
                    try:
                        self.on_frames(peer.link, frames)
                    except Exception as error:  # the client read that polled goes on (see link.py)
                        handler_failed("on_frames", peer.index, error)

    # --- local interest → siblings ---------------------------------------------------------------

    def tell_sibling_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        for listener in self.sibling_interest_listeners:
            listener(account, sub, added)

    def on_local_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        """A subscription here changed: one of a client or an internal client, or (server/routes.py) the
        interest of a route this worker holds, which siblings see as this worker's own."""
        conn = sub.conn
        if getattr(conn, "is_link", False) and not conn.is_route:
            return
        if sub.queue is None:
            key = (account.name, sub.subject)
            refs = self._plain_refs.get(key, 0) + (1 if added else -1)
            if refs > 0:
                self._plain_refs[key] = refs
            else:
                self._plain_refs.pop(key, None)
            if not (added and refs == 1) and not (not added and refs == 0):
                return
        kind = KIND_INTEREST_ADD if added else KIND_INTEREST_REMOVE
        payload = self._sequenced(encode_interest(account.name.encode(), sub.subject, sub.queue))
        for peer in self.peers.values():
            peer.send(kind, payload)
            if not peer.closed:
                peer.link.flush()  # interest goes out now, not at the end of the loop turn

    def _sequenced(self, interest: bytes) -> bytes:
        return _SEQ.pack(self.sync.next_seq()) + interest

    def _send_all_interest(self, peer: LinkPeer) -> None:
        """Our whole interest set to one (restarted) sibling. Every entry carries our current number
        and takes no new one: the set is no change of ours, and the other siblings never see these
        frames, so numbering them would leave each of them an ACK behind that it can never send (a
        PONG then waited for their next interest change: the socketpair start-up stall)."""
        current = _SEQ.pack(self.sync.seq)
        for account_name, subject in self._plain_refs:
            peer.send(KIND_INTEREST_ADD, current + encode_interest(account_name.encode(), subject, None))
        for account in self.server.accounts.all():
            for sub in account.sublist.all_subscriptions():
                if sub.queue is not None and (not sub.conn.is_link or sub.conn.is_route):
                    interest = encode_interest(account.name.encode(), sub.subject, sub.queue)
                    peer.send(KIND_INTEREST_ADD, current + interest)

    # --- the interest gate (fabric/sync.py): PONG after every live sibling applied our interest ------

    def interest_synced(self) -> bool:
        """Every live sibling applied our interest changes, and we know the interest of each (a client's
        first read and its PONGs wait for this)."""
        return self.sync.synced()

    def wait_interest_synced(self, callback: Callable[[], None]) -> None:
        """Call `callback` once interest_synced() holds for the changes made so far. Only a sibling whose
        process is gone stops being waited for; a live one, however slow, is waited for."""
        if self.sync.synced():
            callback()
            return
        if self.sync.waiting >= limits.INTEREST_SYNC_WAITERS_MAX:
            logger.warning("interest sync: %d waiters already; answering without waiting", self.sync.waiting)
            callback()
            return
        self.sync.add_waiter(callback)
        self._arm_sync_timer()

    def _arm_sync_timer(self) -> None:
        if self._sync_timer is None and self._loop is not None and self.sync.waiting:
            self._sync_timer = self._loop.call_later(limits.INTEREST_SYNC_TIMEOUT_S, self._sync_timed_out)

    def _sync_timed_out(self) -> None:
        """Waiters took INTEREST_SYNC_TIMEOUT_S: a sibling that blocks them is given up on only if its
        process is gone (a kernel without pidfds learns it here); a live one is waited for, loudly."""
        self._sync_timer = None
        liveness = self._liveness
        for index in self.sync.blocking_waiters():
            pid = self.sync.siblings[index].pid
            if pid is not None and liveness is not None and not liveness.alive(pid):
                self.sync.on_exit(index, pid)
        self._release_synced()
        blocking = self.sync.blocking_waiters()
        if blocking:
            described = ", ".join(self._describe_sibling(index) for index in blocking)
            logger.warning("interest sync: %d PONG(s) or first read(s) waited %ss for %s; still waiting",
                           self.sync.waiting, limits.INTEREST_SYNC_TIMEOUT_S, described)
            self._arm_sync_timer()

    def _describe_sibling(self, index: int) -> str:
        sibling = self.sync.siblings[index]
        if sibling.pid is None:
            return f"worker {index} (not heard from since this worker started)"
        state = "ACK" if sibling.known else "interest"
        return f"worker {index} (pid {sibling.pid}, alive, its {state} not received)"

    def _release_synced(self) -> None:
        for callback in self.sync.take_released():
            callback()
        if not self.sync.waiting and self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None

    def _watch_sibling(self, index: int, pid: int | None) -> None:
        if pid is not None and self._liveness is not None:
            self._liveness.watch(pid, lambda exited: self._on_sibling_exit(index, exited))

    def _on_sibling_exit(self, index: int, pid: int) -> None:
        if self.sync.on_exit(index, pid):
            logger.info("worker %d (pid %d) exited: not waiting for its interest ACKs until it is back",
                        index, pid)
            self._release_synced()

    # --- LinkHandler -----------------------------------------------------------------------------

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        """Apply a batch of frames from a sibling. A frame whose handling raises is dropped alone
        (logged once per kind: FRAME_ERRORS) and the batch goes on: a failing request, a malformed
        frame or a bug in one subscriber's handler never costs the frames behind it, nor the link."""
        peer = self._by_link[id(link)]
        server = self.server
        seen_before = peer.seen_seq
        sync_changed = False
        previous_producer = server.producer
        server.producer = peer  # type: ignore[assignment]  # a full local subscriber pauses this link
        peer.batches_in += 1
        try:
            for kind, payload in frames:
                try:
                    sync_changed = self._on_frame(peer, kind, payload) or sync_changed
                except Exception as error:
                    FRAME_ERRORS.contain(f"frame of kind {kind} from worker {peer.index}", error)
        finally:
            try:
                if peer.seen_seq != seen_before:
                    peer.send(KIND_INTEREST_ACK, _SEQ.pack(peer.seen_seq))
                server.flush_dirty()
            finally:
                server.producer = previous_producer
        if sync_changed:
            self._release_synced()  # after the batch: a released client's held reads run as its own producer

    def _on_frame(self, peer: LinkPeer, kind: int, payload: bytes) -> bool:
        """One frame from `peer`; True when it changed the interest sync state."""
        if kind == KIND_MESSAGE:
            self._deliver_records(peer, payload)
        elif kind == KIND_INTEREST_ADD:
            peer.seen_seq = _SEQ.unpack_from(payload, 0)[0]
            self._add_remote_interest(peer, *decode_interest(payload[_SEQ.size:]))
        elif kind == KIND_INTEREST_REMOVE:
            peer.seen_seq = _SEQ.unpack_from(payload, 0)[0]
            self._remove_remote_interest(peer, *decode_interest(payload[_SEQ.size:]))
        elif kind == KIND_INTEREST_ACK:
            self.sync.on_ack(peer.index, _SEQ.unpack_from(payload, 0)[0])
            return True
        elif kind == KIND_HELLO:
            pid = decode_pid(payload)
            logger.debug("worker %d (re)started (pid %s): forgetting its old interest", peer.index, pid)
            peer.forget_interest()
            peer.seen_seq = 0
            self.sync.on_hello(peer.index, pid)  # the new incarnation gets everything again below
            self._watch_sibling(peer.index, pid)
            peer.send(KIND_INTEREST_RESET, b"")
            self._send_all_interest(peer)
            peer.send(KIND_INTEREST_SYNCED, encode_pid(self.pid))
            return True
        elif kind == KIND_INTEREST_RESET:
            peer.forget_interest()
        elif kind == KIND_INTEREST_SYNCED:
            pid = decode_pid(payload)
            self.sync.on_answer(peer.index, pid)  # we hold its whole interest now
            self._watch_sibling(peer.index, pid)
            return True
        elif kind == KIND_MONITOR_REQUEST:
            self._answer_monitor_request(peer, payload)
        elif kind == KIND_MONITOR_REPLY:
            self._take_monitor_reply(peer, payload)
        return False

    def on_writable(self, link: Link) -> None:
        self._by_link[id(link)].drain()
        self.server.flush_dirty()

    def on_broken(self, link: Link, error: Exception) -> None:
        peer = self._by_link[id(link)]
        logger.warning("link to worker %d broke: %s", peer.index, error)
        peer.forget_interest()
        peer.closed = True
        self.sync.on_broken(peer.index)
        self._release_synced()

    # --- monitoring across workers ----------------------------------------------------------------

    async def gather_snapshots(self, parts: frozenset[str],
                               timeout_s: float = limits.MONITOR_GATHER_TIMEOUT_S) -> list[dict[str, object]]:
        """Every sibling's monitoring snapshot, with the `parts` asked for (those that answer within the
        timeout). Callers keep one gather in flight (server/monitor/gather.py)."""
        if not self.peers:
            return []
        self._next_request += 1
        request_id = self._next_request
        future: asyncio.Future[list[dict[str, object]]] = asyncio.get_running_loop().create_future()
        replies: dict[int, dict[str, object]] = {}
        self._awaiting[request_id] = (future, replies)
        payload = json.dumps({"id": request_id, "parts": sorted(parts)}).encode()
        for peer in self.peers.values():
            peer.send(KIND_MONITOR_REQUEST, payload)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            self._gather_timeouts += 1
            now = time.monotonic()
            if now - self._gather_warned_mono_s >= GATHER_WARNING_QUIET_S:  # never a warning per request
                silent = ", ".join(str(peer.index) for peer in self.peers.values() if peer.index not in replies)
                logger.warning("monitoring: sibling worker(s) %s did not answer in %ss (%d gather(s) timed out "
                               "since the last warning)", silent, timeout_s, self._gather_timeouts)
                self._gather_warned_mono_s = now
                self._gather_timeouts = 0
            return list(replies.values())
        finally:
            self._awaiting.pop(request_id, None)

    def _answer_monitor_request(self, peer: LinkPeer, payload: bytes) -> None:
        request = json.loads(payload)
        parts = frozenset(request.get("parts", ()))
        snapshot = self.snapshot_provider(peer.link.frame_bytes_max, parts) if self.snapshot_provider else {}
        peer.send(KIND_MONITOR_REPLY, json.dumps({"id": request["id"], "snapshot": snapshot}).encode())

    def _take_monitor_reply(self, peer: LinkPeer, payload: bytes) -> None:
        reply = json.loads(payload)
        waiting = self._awaiting.get(reply["id"])
        if waiting is None:
            return
        future, replies = waiting
        replies[peer.index] = reply["snapshot"]
        if len(replies) == len(self.peers) and not future.done():
            future.set_result(list(replies.values()))

    def stuck_links(self, now_s: float) -> list[int]:
        """Siblings whose frames to us have waited, unpaused and untaken, for LINK_STUCK_S (drain_watch.py):
        this worker is not doing its share and should be restarted. Called once per heartbeat."""
        return [peer.index for peer in self.peers.values()
                if not peer.closed and peer.drain_watch.stuck(
                    now_s, waiting=peer.link.incoming_waiting(), paused=peer.receiving_paused,
                    progress=peer.batches_in)]

    @property
    def index(self) -> int:
        """This worker's index: the mesh joins workers 0..n-1 each to every other, so ours is the one
        no link leads to."""
        return min(set(range(len(self.peers) + 1)) - set(self.peers))

    def queue_lengths(self) -> dict[str, int]:
        """This worker's internal queues toward its siblings, by name (/ipqueuesz)."""
        queues = {f"link to worker {peer.index} backlog": len(peer.backlog) for peer in self.peers.values()}
        queues["interest sync waiters"] = self.sync.waiting
        queues["monitoring gathers awaited"] = len(self._awaiting)
        return queues

    def ring_fill(self) -> float:
        """The fullest outbound link of this worker, 0.0 to 1.0 (for the supervisor's status table)."""
        fullest = 0.0
        for peer in self.peers.values():
            fill = getattr(peer.link, "fill", None)
            capacity = getattr(peer.link, "capacity", 0)
            if fill is not None and capacity:
                fullest = max(fullest, min(fill()[0] / capacity, 1.0))
        return fullest

    def remote_interest_count(self, account: str) -> int:
        """Entries in this worker's sublists that stand for siblings' interest (not subscriptions here)."""
        return sum(len(subs) for peer in self.peers.values() for (acc, _, _), subs in peer.interest.items()
                   if acc.decode() == account)

    # --- frames from siblings --------------------------------------------------------------------

    def _add_remote_interest(self, peer: LinkPeer, account_name: bytes, subject: bytes, queue: bytes | None) -> None:
        """Recorded even for an account this worker does not know (yet): a sibling that applied a reload
        first may tell of interest in an account added by it; `accounts_changed` inserts it here then."""
        key = (account_name, subject, queue)
        subs = peer.interest.setdefault(key, [])
        if queue is None and subs:
            return
        self._next_sid += 1
        sub = Subscription(peer, subject, queue, b"L%d" % self._next_sid, account_name.decode(errors="replace"))
        subs.append(sub)
        account = self.server.accounts.get(sub.account)
        if account is not None:
            account.sublist.insert(sub)
            self.tell_sibling_interest(account, sub, True)

    def _remove_remote_interest(self, peer: LinkPeer, account_name: bytes, subject: bytes,
                                queue: bytes | None) -> None:
        key = (account_name, subject, queue)
        subs = peer.interest.get(key)
        if not subs:
            return
        sub = subs.pop()
        if not subs:
            del peer.interest[key]
        account = self.server.accounts.get(sub.account)
        if account is not None:
            account.sublist.remove(sub)
            self.tell_sibling_interest(account, sub, False)

    def accounts_changed(self, added: list[Account], removed: list[Account]) -> None:
        """A reload added or removed accounts (server/accounts.py): siblings' interest recorded for an
        added one is inserted now; a removed one's sublist goes with it (the routes forget it themselves)."""
        if not added and not removed:
            return
        self._accounts.clear()
        for account in added:
            name = account.name.encode()
            for peer in self.peers.values():
                for (account_name, _, _), subs in peer.interest.items():
                    if account_name != name:
                        continue
                    for sub in subs:
                        account.sublist.insert(sub)
                        self.tell_sibling_interest(account, sub, True)

    def _deliver_records(self, peer: LinkPeer, payload: bytes) -> None:
        """The hot path of the receiving worker. The frame's records come as runs (consecutive records
        with the same account, subject and queue — a publisher's burst): a plain run is matched once
        and each local subscriber gets the whole run appended to its output in one C call
        (`deliver_run`); a subscriber without it (an internal client), or one that declines it (a
        client with permissions), gets the records one by one. Queue records pick a member each, via _deliver_locally."""
        for account_name, subject, queue, start, end, count in record_runs(payload):
            peer.msgs_in += count
            if queue is not None:
                for _, _, reply, _, header, data in decode_records(payload[start:end]):
                    self._deliver_locally(account_name, subject, reply, queue, header, data)
                continue
            account = self._account(account_name)
            if account is None:
                continue
            sublist = account.sublist
            result = sublist.cache.get(subject)
            if result is None:
                result = sublist.match(subject)
            records: list[Record] | None = None
            for sub in result[0]:
                conn = sub.conn
                if conn.is_link and not conn.is_route:
                    continue  # one hop: never to another sibling (a route, yes: server/routes.py)
                deliver_run = getattr(conn, "deliver_run", None)
                if deliver_run is not None and deliver_run(sub, payload, start, end, count):
                    continue
                if records is None:
                    records = decode_records(payload[start:end])
                for _, _, reply, _, header, data in records:
                    conn.deliver(sub, subject, reply, header, data)

    def _account(self, name: bytes) -> Account | None:
        account = self._accounts.get(name)
        if account is None:
            account = self.server.accounts.get(name.decode())
            if account is not None:
                self._accounts[name] = account
        return account

    def _deliver_locally(self, account_name: bytes, subject: bytes, reply: bytes | None, queue: bytes | None,
                         header: bytes | None, data: bytes) -> None:
        account = self._account(account_name)
        if account is None:
            return
        sublist = account.sublist
        result = sublist.cache.get(subject)
        if result is None:
            result = sublist.match(subject)
        plain, queues = result
        if queue is None:
            for sub in plain:
                conn = sub.conn
                if not conn.is_link or conn.is_route:
                    conn.deliver(sub, subject, reply, header, data)
            return
        for members in queues:
            if members[0].queue != queue:
                continue
            local = tuple(m for m in members if not m.conn.is_link or m.conn.is_route)
            if local:
                chosen = pick(local, None, True, self.server.rng)
                if chosen is not None:
                    chosen.conn.deliver(chosen, subject, reply, header, data)
            return
