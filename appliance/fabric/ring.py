"""RingLink: a Link over two SPSC rings in shared memory (native/ring.c) and two eventfd doorbells.

Worker i's link to worker j produces into ring i→j and consumes ring j→i. Doorbell "i→j" is
written only by i and read only by j: i rings it when it published into ring i→j while j slept,
and when it freed space in ring j→i that j waits for. So each worker reads one doorbell per peer.

Theory of operation (one asyncio loop, one thread per worker):
- Draining: in the doorbell's own callback, or on the first turn when started, the link pops one
  bounded batch, hands it to `on_frames`, and schedules itself again with `call_soon` while frames
  remain. When the ring is empty it announces sleep (`ring_reader_sleep`), re-checks, and from then
  on the producer rings: at once, in the `try_send` that found the reader asleep (at most once per
  sleep), so a frame never waits for the end of the sender's turn, a timer or a poll.
- Writing: `try_send` is one C call. When the ring is full it returns False; a started link
  announces the wait (`ring_writer_wait`) and calls `on_writable` once the consumer freed enough
  (the consumer rings our doorbell), or at once on the next turn if space appeared meanwhile.
- Restarts: `start` rings the peer once, because a dead incarnation may have cleared the peer's
  sleep or wait flag without living to ring its doorbell.
- The mapping and the fds belong to the attachment (mesh.py); a RingLink only borrows them.

Requires appliance._native: without it there is no RingLink (use socketpair.py).
"""

from __future__ import annotations

import mmap
import os
from types import ModuleType

from appliance import limits, native
from appliance.errors import ClosedError, CorruptData, LimitExceeded
from appliance.fabric.frames import KIND_MAX, KIND_RESERVED, Frame, frame_bytes_max
from appliance.fabric.link import LinkHandler, LinkLoop, Payload, handler_failed

# A stand-in without attributes keeps this module importable (and typed) when native is off.
_native: ModuleType = native.speedups or ModuleType("appliance._native (not built)")
_push = getattr(_native, "ring_push", None)
PUSH_FULL = 0
PUSH_DONE = 1
PUSH_WAKE = 2
CLOSED_MEMORY = bytearray(0)  # what a closed link pushes into: the C call refuses it


def ring_doorbell(fd: int) -> None:
    os.eventfd_write(fd, 1)


def clear_doorbell(fd: int) -> None:
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


class RingLink:
    """One worker's end of the ring pair to `peer`."""

    def __init__(
        self,
        memory: mmap.mmap | bytearray,
        *,
        peer: int,
        out_offset: int,
        in_offset: int,
        out_bell_fd: int,
        in_bell_fd: int,
    ) -> None:
        assert native.ENABLED and _push is not None, "RingLink needs appliance._native"
        assert out_offset != in_offset
        self._memory = memory
        self._push_memory: mmap.mmap | bytearray = memory  # swapped for CLOSED_MEMORY by close()
        self._peer = peer
        self._out = out_offset
        self._in = in_offset
        self._out_bell = out_bell_fd
        self._in_bell = in_bell_fd
        capacity, frame_max = _native.ring_check(memory, out_offset)
        assert _native.ring_check(memory, in_offset) == (capacity, frame_max), "both directions alike"
        assert frame_max == frame_bytes_max(capacity), "rings are made by mesh.create_mesh"
        self.capacity: int = capacity
        self._frame_bytes_max: int = frame_max
        self._loop: LinkLoop | None = None
        self._handler: LinkHandler | None = None
        self._drain_scheduled = False
        self._receiving_paused = False
        self._blocked_bytes: int | None = None  # payload size of the refused frame we wait for
        self._writable_scheduled = False
        self._closed = False

    @property
    def peer(self) -> int:
        return self._peer

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    def try_send(self, kind: int, payload: Payload) -> bool:
        # The hot path is one C call: it refuses (ValueError) a frame above the ring's
        # frame_bytes_max, kind 0, and any call once closed (the memory is swapped out then).
        try:
            result = _push(self._push_memory, self._out, kind, payload)  # type: ignore[misc]
        except ValueError as error:
            raise self._refusal(kind, payload) from error
        if result == PUSH_DONE:
            return True
        if result == PUSH_WAKE:
            self._ring_peer()
            return True
        self._wait_for_space()
        return False

    def _refusal(self, kind: int, payload: Payload) -> Exception:
        if self._closed:
            return ClosedError(f"link to worker {self._peer} is closed")
        if len(payload) > self._frame_bytes_max:
            return LimitExceeded(f"frame of {len(payload)} bytes > {self._frame_bytes_max} (FRAME_BYTES_MAX)")
        assert kind != KIND_RESERVED, "kind 0 is the transport's own"
        return ValueError(f"frame (kind {kind}, {len(payload)} bytes) refused by the ring")

    def try_send_many(self, frames: list[Frame], start: int = 0) -> int:
        """Sends frames[start:] until one does not fit, published at once (one C call, one
        doorbell); returns the index of the first frame not sent. A refused frame (too large,
        kind 0) raises as in try_send, and then nothing of the batch was sent."""
        try:
            index, wake = _native.ring_push_many(self._push_memory, self._out, frames, start)
        except ValueError as error:
            bad = [frame for frame in frames[start:] if len(frame[1]) > self._frame_bytes_max or not frame[0]]
            raise self._refusal(*(bad[0] if bad else (KIND_MAX, b""))) from error
        if wake:
            self._ring_peer()
        if index < len(frames):
            self._wait_for_space()
        return int(index)

    def receive(self, frames_max: int = limits.LINK_BATCH_FRAMES_MAX) -> list[Frame]:
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        assert 1 <= frames_max <= limits.LINK_BATCH_FRAMES_MAX
        frames: list[Frame] = []
        try:
            _count, wake_writer = _native.ring_pop(
                self._memory, self._in, frames, frames_max, limits.LINK_BATCH_BYTES_MAX
            )
        except RuntimeError as error:
            raise CorruptData(f"ring from worker {self._peer}: {error}") from error
        if wake_writer:
            self._ring_peer()
        return frames

    def flush(self) -> bool:
        return True  # a pushed frame is visible to the consumer at once

    def fill(self) -> tuple[int, int]:
        """Bytes in flight (outgoing, incoming)."""
        out_head, out_tail = _native.ring_counters(self._memory, self._out)
        in_head, in_tail = _native.ring_counters(self._memory, self._in)
        return out_head - out_tail, in_head - in_tail

    def incoming_waiting(self) -> bool:
        if self._closed:
            return False
        head, tail = _native.ring_counters(self._memory, self._in)
        return bool(head != tail)

    def start(self, loop: LinkLoop, handler: LinkHandler) -> None:
        assert self._loop is None, "a link is started once"
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        self._loop = loop
        self._handler = handler
        loop.add_reader(self._in_bell, self._on_doorbell)
        self._schedule_drain()  # frames may be waiting, and the sleep flag is not set yet
        # A previous incarnation of this worker may have died between clearing a flag and
        # ringing: wake the peer once so it re-checks both rings instead of sleeping forever.
        self._ring_peer()
        if self._blocked_bytes is not None:
            self._wait_for_space()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._push_memory = CLOSED_MEMORY
        if self._loop is not None:
            self._loop.remove_reader(self._in_bell)

    # --- loop side -------------------------------------------------------------------------------

    def _on_doorbell(self) -> None:
        clear_doorbell(self._in_bell)
        if self._closed:
            return
        if self._blocked_bytes is not None and not self._writer_still_waits(self._blocked_bytes):
            self._schedule_writable()
        self._drain()  # in this callback: a woken reader takes the frames now, not a loop turn later

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and self._loop is not None:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def pause_receiving(self) -> None:
        """Stop handing frames to the handler (its consumers are full); the ring fills, and the
        producer's try_send returns False: backpressure reaches the sending worker."""
        self._receiving_paused = True

    def resume_receiving(self) -> None:
        self._receiving_paused = False
        self._schedule_drain()

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._closed or self._receiving_paused:
            return
        assert self._handler is not None
        try:
            frames = self.receive()
        except CorruptData as error:
            self.close()
            try:
                self._handler.on_broken(self, error)
            except Exception as failure:
                handler_failed("on_broken", self._peer, failure)
            return
        if frames:
            try:
                self._handler.on_frames(self, frames)
            except Exception as error:  # contained: the drain below goes on (see link.py)
                handler_failed("on_frames", self._peer, error)
        if self._closed:
            return
        if len(frames) == limits.LINK_BATCH_FRAMES_MAX or not _native.ring_reader_sleep(self._memory, self._in):
            self._schedule_drain()

    def _ring_peer(self) -> None:
        """Rings the peer's doorbell now. The ring asks for it at most once per sleep of the peer
        (the first frame after it slept), so a turn that sends many frames costs one eventfd write
        anyway; ringing at once lets the peer start on the first frame while this worker still
        produces the rest, instead of after the rest of this loop turn."""
        if not self._closed:  # once closed, the fd may belong to someone else
            ring_doorbell(self._out_bell)

    def _wait_for_space(self) -> None:
        # Resume only when a largest frame fits: a quarter of the ring, not one frame at a time.
        self._blocked_bytes = self._frame_bytes_max
        if self._loop is not None and not self._writer_still_waits(self._blocked_bytes):
            self._schedule_writable()

    def _writer_still_waits(self, payload_bytes: int) -> bool:
        return bool(_native.ring_writer_wait(self._memory, self._out, payload_bytes))

    def _schedule_writable(self) -> None:
        if not self._writable_scheduled and self._loop is not None:
            self._writable_scheduled = True
            self._loop.call_soon(self._fire_writable)

    def _fire_writable(self) -> None:
        self._writable_scheduled = False
        if self._closed or self._blocked_bytes is None:
            return
        self._blocked_bytes = None
        assert self._handler is not None
        try:
            self._handler.on_writable(self)
        except Exception as error:
            handler_failed("on_writable", self._peer, error)
