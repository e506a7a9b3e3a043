"""SocketpairLink: the Link without native code, over one AF_UNIX stream socket per worker pair.

Correct, slower, and full at exactly the same point as the shared-memory ring: in-flight bytes are
counted with the ring's arithmetic (`RingSpace`) and the consumer returns credits.

Theory of operation:
- The stream carries records `[len u32][kind u32][seq u32][check u32][payload padded to 8]` both
  ways. Kind 0 is a credit: its 8-byte payload is the consumer's cumulative `tail`, so the newest
  credit replaces every older one. `seq` counts the records of one direction and `check` is
  crc32(payload) ^ len ^ kind ^ seq ^ WIRE_CHECK: a stream out of step (a peer that died
  mid-record and was restarted on the same socket) is BrokenError, never a garbage frame.
- The producer accepts a frame only when `RingSpace.fits` it under the last credit seen (reading
  the socket for newer credits first), so it never has more than `capacity` bytes in flight and
  its outgoing buffer is bounded by twice `capacity` (a wire header is 8 bytes longer than
  a ring record's) plus one credit.
- The consumer accounts arrivals in a second RingSpace: a peer that exceeds its credit broke the
  protocol (BrokenError), so the incoming buffer is bounded by `capacity` plus one read chunk.
- Driven by a loop, writes are gathered and sent once per turn (`call_soon`), a socket that
  refuses bytes is watched with `add_writer`, and the readable socket is the doorbell.

Rejoining a restarted peer (`rejoinable=True`, the links a supervisor made: mesh.py). A socket
cannot be reused by a new incarnation of the peer (the dead one may have left half a record in
either direction), so the supervisor hands both ends of a FRESH socketpair over: one to the
restarted worker at spawn, one to this link through `rejoin(sock)` (SCM_RIGHTS, handover.py).
- Until then the link behaves like a ring whose consumer died: the peer's end reading EOF (or a
  send failing with EPIPE) makes the link *detached*, not broken. It still accepts frames while
  the old credit lasts, then refuses (backpressure); what it would send is dropped, nothing
  reaches the handler's on_broken.
- `rejoin(sock)` reads what the dead peer sent before it died (whole records only: half a
  record is dropped), swaps the socket and starts both directions afresh (seq 0, empty
  RingSpaces). Frames received from the old incarnation are still handed over first, in order;
  they hold no credit in the new accounting. Frames accepted for the old incarnation and not yet
  read by it are dropped: nothing sent to a dead peer reaches its successor. A producer paused
  on the full old link gets on_writable.
- The router never learns that the socket changed: the restarted peer's HELLO on the fresh
  socket makes it forget and resend interest (server/links.py), exactly as on a ring.
Without `rejoinable` (a link nobody will ever rejoin) the peer's EOF is BrokenError.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections import deque

from appliance import limits
from appliance.errors import BrokenError, ClosedError, LimitExceeded
from appliance.fabric.frames import (
    KIND_MAX,
    KIND_RESERVED,
    Frame,
    RingSpace,
    frame_bytes_max,
)
from appliance.fabric.link import LinkHandler, LinkLoop, Payload, handler_failed

CREDIT = struct.Struct("<Q")
WIRE_HEADER = struct.Struct("<IIII")  # len, kind, seq, check
WIRE_HEADER_BYTES = WIRE_HEADER.size
WIRE_CHECK = 0x53505041  # "APPS"
SEQ_MASK = 0xFFFFFFFF
PADDING = bytes(8)


def wire_header(kind: int, seq: int, payload: Payload) -> bytes:
    length = len(payload)
    return WIRE_HEADER.pack(length, kind, seq, zlib.crc32(payload) ^ length ^ kind ^ seq ^ WIRE_CHECK)


class SocketpairLink:
    """One worker's end of the socketpair to `peer`; the link borrows the socket, never closes it."""

    def __init__(self, sock: socket.socket, *, peer: int, capacity: int, rejoinable: bool = False) -> None:
        assert sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._peer = peer
        self.capacity = capacity
        self._frame_bytes_max = frame_bytes_max(capacity)
        self._tx_space = RingSpace(capacity)  # what we sent; its tail follows the peer's credits
        self._rx_space = RingSpace(capacity)  # what the peer sent; its tail is our credit
        self._tx_pending = bytearray()  # bounded: 2 * capacity + one credit record
        self._credit_at: int | None = None  # offset of an unsent credit record in _tx_pending
        self._rx_buffer = bytearray()  # bounded: one partial record + one read chunk
        self._rx_frames: deque[Frame] = deque()  # bounded by _rx_space
        self._tx_seq = 0  # seq of our next record
        self._credit_seq = 0  # seq of the unsent credit record at _credit_at
        self._rx_seq = 0  # seq the peer's next record must carry
        self._loop: LinkLoop | None = None
        self._handler: LinkHandler | None = None
        self._blocked_bytes: int | None = None
        self._flush_scheduled = False
        self._drain_scheduled = False
        self._receiving_paused = False
        self._writable_scheduled = False
        self._watching_writes = False
        self._closed = False
        self._broken: BrokenError | None = None
        self._rejoinable = rejoinable
        self._detached = False  # the peer is gone; a rejoin will bring a fresh socket
        self._rx_stale = 0  # frames at the head of _rx_frames received before the last rejoin
        self.rejoins = 0

    @property
    def peer(self) -> int:
        return self._peer

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    def try_send(self, kind: int, payload: Payload) -> bool:
        self._check_usable()
        assert KIND_RESERVED < kind <= KIND_MAX, "kind 0 is the transport's own"
        length = len(payload)
        if length > self._frame_bytes_max:
            raise LimitExceeded(f"frame of {length} bytes > {self._frame_bytes_max} (FRAME_BYTES_MAX)")
        if not self._tx_space.try_push(length):
            self._read_socket()  # newer credits may be waiting
            self._check_usable()
            if not self._tx_space.try_push(length):
                self._blocked_bytes = self._frame_bytes_max  # resume with room for the largest frame
                return False
        pending = self._tx_pending
        pending += wire_header(kind, self._tx_seq, payload)
        self._tx_seq = (self._tx_seq + 1) & SEQ_MASK
        pending += payload
        if length & 7:
            pending += PADDING[: 8 - (length & 7)]
        self._schedule_flush()
        return True

    def receive(self, frames_max: int = limits.LINK_BATCH_FRAMES_MAX) -> list[Frame]:
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        assert 1 <= frames_max <= limits.LINK_BATCH_FRAMES_MAX
        self._read_socket()
        frames: list[Frame] = []
        batch_bytes = 0
        credited = False
        while self._rx_frames and len(frames) < frames_max:
            length = len(self._rx_frames[0][1])
            if frames and batch_bytes + length > limits.LINK_BATCH_BYTES_MAX:
                break
            frames.append(self._rx_frames.popleft())
            if self._rx_stale:
                self._rx_stale -= 1  # from before the last rejoin: no credit to return
            else:
                self._rx_space.pop(length)
                credited = True
            batch_bytes += length
        if credited:
            self._queue_credit()
            self._schedule_flush()
        elif not frames and self._broken is not None:
            raise self._broken
        return frames

    def flush(self) -> bool:
        if self._closed or self._broken is not None:
            return True
        self._read_socket()
        if self._detached:
            self._tx_pending.clear()  # for a dead peer: nobody will ever read it
            self._credit_at = None
            return True
        if self._tx_pending and self._broken is None:
            try:
                sent = self._sock.send(self._tx_pending)
            except BlockingIOError:
                sent = 0
            except OSError as error:
                self._peer_gone(error)
                return True
            del self._tx_pending[:sent]
            if self._credit_at is not None:
                self._credit_at = self._credit_at - sent if self._credit_at >= sent else None
        self._watch_writes(bool(self._tx_pending))
        return not self._tx_pending

    def incoming_waiting(self) -> bool:
        return not self._closed and bool(self._rx_frames)

    def start(self, loop: LinkLoop, handler: LinkHandler) -> None:
        assert self._loop is None, "a link is started once"
        self._check_usable()
        self._loop = loop
        self._handler = handler
        loop.add_reader(self._fd, self._read_socket)
        self._schedule_flush()
        self._schedule_drain()
        if self._blocked_bytes is not None and self._tx_space.fits(self._blocked_bytes):
            self._schedule_writable()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unregister()

    def rejoin(self, sock: socket.socket) -> None:
        """The peer restarted: carry on over `sock`, this end of a fresh socketpair whose other end
        the new incarnation holds (see the module docstring). The link borrows `sock` as it
        borrowed the old socket, which the caller closes once this returns."""
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        if self._broken is not None:
            raise self._broken
        assert self._rejoinable, "only a link made rejoinable is handed fresh sockets"
        assert sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM
        self._read_socket()  # the dead incarnation's last whole records (up to its EOF)
        self._unregister()
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._detached = False
        self._rx_stale = len(self._rx_frames)
        self._rx_buffer.clear()  # half a record of the dead incarnation, if any
        self._rx_space = RingSpace(self.capacity)
        self._rx_seq = 0
        self._tx_space = RingSpace(self.capacity)
        self._tx_pending.clear()  # accepted for the dead incarnation, never read by it
        self._credit_at = None
        self._tx_seq = 0
        self.rejoins += 1
        if self._loop is not None:
            self._loop.add_reader(self._fd, self._read_socket)
            self._schedule_drain()
            if self._blocked_bytes is not None:
                self._schedule_writable()  # the fresh space has room: a paused producer resumes

    # --- internals -------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        if self._broken is not None:
            raise self._broken

    def _read_socket(self) -> None:
        while not self._closed and self._broken is None and not self._detached:
            try:
                chunk = self._sock.recv(limits.LINK_READ_CHUNK_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as error:
                self._peer_gone(error)
                break
            if not chunk:
                self._peer_gone(None)
                break
            self._rx_buffer += chunk
            self._parse_records()
        if self._loop is not None:
            if self._rx_frames:
                self._schedule_drain()
            if self._blocked_bytes is not None and self._tx_space.fits(self._blocked_bytes):
                self._schedule_writable()

    def _parse_records(self) -> None:
        buffer = self._rx_buffer
        position = 0
        while len(buffer) - position >= WIRE_HEADER_BYTES and self._broken is None:
            length, kind, seq, check = WIRE_HEADER.unpack_from(buffer, position)
            if seq != self._rx_seq:
                self._set_broken(None, detail="stream out of step (did the peer restart?)")
                break
            if kind == KIND_RESERVED and length != CREDIT.size:
                self._set_broken(None, detail="bad credit record")
                break
            if length > self._frame_bytes_max:
                self._set_broken(None, detail="frame larger than the link's maximum")
                break
            record = WIRE_HEADER_BYTES + ((length + 7) & ~7)
            if len(buffer) - position < record:
                break
            start = position + WIRE_HEADER_BYTES
            with memoryview(buffer) as view:
                payload = bytes(view[start : start + length])
            if check != zlib.crc32(payload) ^ length ^ kind ^ seq ^ WIRE_CHECK:
                self._set_broken(None, detail="record check failed (did the peer restart mid-record?)")
                break
            if kind == KIND_RESERVED:
                (tail,) = CREDIT.unpack(payload)
                if not self._tx_space.tail <= tail <= self._tx_space.head:
                    self._set_broken(None, detail="credit out of range")
                    break
                self._tx_space.tail = tail
            else:
                if not self._rx_space.try_push(length):
                    self._set_broken(None, detail="peer exceeded its credit")
                    break
                self._rx_frames.append((kind, payload))
            self._rx_seq = (seq + 1) & SEQ_MASK
            position += record
        del buffer[:position]

    def _queue_credit(self) -> None:
        value = CREDIT.pack(self._rx_space.tail)
        if self._credit_at is None:
            self._credit_at = len(self._tx_pending)
            self._credit_seq = self._tx_seq
            self._tx_seq = (self._tx_seq + 1) & SEQ_MASK
            self._tx_pending += wire_header(KIND_RESERVED, self._credit_seq, value) + value
        else:  # not sent yet: the newest credit replaces it in place, same seq
            record = wire_header(KIND_RESERVED, self._credit_seq, value) + value
            self._tx_pending[self._credit_at : self._credit_at + len(record)] = record

    def _peer_gone(self, cause: OSError | None) -> None:
        """EOF, a reset or EPIPE: the peer process is gone. Detached until a rejoin if one will come."""
        if not self._rejoinable:
            self._set_broken(cause)
            return
        self._detached = True
        self._unregister()
        self._tx_pending.clear()
        self._credit_at = None

    def _set_broken(self, cause: OSError | None, *, detail: str = "peer closed the link") -> None:
        if self._broken is not None:
            return
        error = BrokenError(f"link to worker {self._peer}: {detail}")
        error.__cause__ = cause
        self._broken = error
        self._unregister()
        if self._handler is not None and self._loop is not None:
            handler = self._handler
            self._loop.call_soon(self._tell_broken, handler, error)

    def _tell_broken(self, handler: LinkHandler, error: BrokenError) -> None:
        try:
            handler.on_broken(self, error)
        except Exception as failure:
            handler_failed("on_broken", self._peer, failure)

    def _unregister(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._watch_writes(False)

    def _watch_writes(self, wanted: bool) -> None:
        if self._loop is None or wanted == self._watching_writes:
            return
        self._watching_writes = wanted
        if wanted:
            self._loop.add_writer(self._fd, self.flush)
        else:
            self._loop.remove_writer(self._fd)

    def _schedule_flush(self) -> None:
        if self._loop is None:
            return  # not started: the caller flushes
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def _schedule_drain(self) -> None:
        if self._loop is not None and not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def pause_receiving(self) -> None:
        """Stop handing frames to the handler; unread frames hold their credit, so the sender
        stops at `capacity` bytes in flight: backpressure reaches the sending worker."""
        self._receiving_paused = True

    def resume_receiving(self) -> None:
        self._receiving_paused = False
        self._schedule_drain()

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._closed or self._receiving_paused or not self._rx_frames:
            return
        assert self._handler is not None
        frames = self.receive()
        if frames:
            try:
                self._handler.on_frames(self, frames)
            except Exception as error:  # contained: the drain below goes on (see link.py)
                handler_failed("on_frames", self._peer, error)
        if self._rx_frames:
            self._schedule_drain()

    def _schedule_writable(self) -> None:
        if self._loop is not None and not self._writable_scheduled:
            self._writable_scheduled = True
            self._loop.call_soon(self._fire_writable)

    def _fire_writable(self) -> None:
        self._writable_scheduled = False
        if self._closed or self._broken is not None or self._blocked_bytes is None:
            return
        self._blocked_bytes = None
        assert self._handler is not None
        try:
            self._handler.on_writable(self)
        except Exception as error:
            handler_failed("on_writable", self._peer, error)
