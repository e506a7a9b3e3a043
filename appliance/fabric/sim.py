"""SimLink: a deterministic, in-process Link for tests and the simulator.

Two ends share two one-way queues, each accounted with the ring's arithmetic (`RingSpace`), so a
SimLink is full exactly where a RingLink of the same capacity is. Nothing happens behind the
caller's back: a started end schedules its callbacks through the scheduler it was given (an
asyncio loop, or the simulator's queue), never from inside try_send or receive. `break_link()`
is the one fault: both ends become broken, as when a socketpair peer dies;
`reattach()` is a restart: a successor end on the same queues, as a restarted worker on its rings.
"""

from __future__ import annotations

from collections import deque

from appliance import limits
from appliance.errors import BrokenError, ClosedError, LimitExceeded
from appliance.fabric.frames import KIND_MAX, KIND_RESERVED, Frame, RingSpace, frame_bytes_max
from appliance.fabric.link import LinkHandler, Payload, Scheduler, handler_failed


class _Direction:
    __slots__ = ("frames", "space")

    def __init__(self, capacity: int) -> None:
        self.space = RingSpace(capacity)
        self.frames: deque[Frame] = deque()  # bounded by `space`


class SimLink:
    def __init__(self, *, peer: int, outgoing: _Direction, incoming: _Direction) -> None:
        self._peer = peer
        self._outgoing = outgoing
        self._incoming = incoming
        self.capacity = outgoing.space.capacity
        self._frame_bytes_max = frame_bytes_max(self.capacity)
        self._other: SimLink | None = None
        self._scheduler: Scheduler | None = None
        self._handler: LinkHandler | None = None
        self._blocked_bytes: int | None = None
        self._drain_scheduled = False
        self._receiving_paused = False
        self._writable_scheduled = False
        self._closed = False
        self._broken: BrokenError | None = None

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
        if not self._outgoing.space.try_push(length):
            self._blocked_bytes = self._frame_bytes_max  # resume with room for the largest frame
            return False
        self._outgoing.frames.append((kind, bytes(payload)))
        if self._other is not None:
            self._other._schedule_drain()
        return True

    def receive(self, frames_max: int = limits.LINK_BATCH_FRAMES_MAX) -> list[Frame]:
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        assert 1 <= frames_max <= limits.LINK_BATCH_FRAMES_MAX
        frames: list[Frame] = []
        batch_bytes = 0
        incoming = self._incoming
        while incoming.frames and len(frames) < frames_max:
            length = len(incoming.frames[0][1])
            if frames and batch_bytes + length > limits.LINK_BATCH_BYTES_MAX:
                break
            frames.append(incoming.frames.popleft())
            incoming.space.pop(length)
            batch_bytes += length
        if frames and self._other is not None:
            self._other._maybe_writable()
        if not frames and self._broken is not None:
            raise self._broken
        return frames

    def flush(self) -> bool:
        return True

    def incoming_waiting(self) -> bool:
        return not self._closed and bool(self._incoming.frames)

    def start(self, loop: Scheduler, handler: LinkHandler) -> None:
        assert self._scheduler is None, "a link is started once"
        self._check_usable()
        self._scheduler = loop
        self._handler = handler
        self._schedule_drain()
        self._maybe_writable()

    def close(self) -> None:
        self._closed = True

    def reattach(self) -> SimLink:
        """A restarted worker's end of the same two queues, as a restarted worker attaches to the same
        rings: what its predecessor left unread is read by the successor. This end is closed."""
        successor = SimLink(peer=self._peer, outgoing=self._outgoing, incoming=self._incoming)
        successor._other = self._other
        if self._other is not None:
            self._other._other = successor
        self._closed = True
        return successor

    def break_link(self) -> None:
        """Fault injection: both ends break, as when the peer process dies."""
        for end in (self, self._other):
            if end is not None:
                end._set_broken()

    # --- internals -------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedError(f"link to worker {self._peer} is closed")
        if self._broken is not None:
            raise self._broken

    def _set_broken(self) -> None:
        if self._broken is not None:
            return
        error = BrokenError(f"link to worker {self._peer}: broken (simulated)")
        self._broken = error
        if self._scheduler is not None and self._handler is not None and not self._closed:
            handler = self._handler
            self._scheduler.call_soon(lambda: handler.on_broken(self, error))

    def _schedule_drain(self) -> None:
        if self._scheduler is not None and not self._drain_scheduled and self._incoming.frames:
            self._drain_scheduled = True
            self._scheduler.call_soon(self._drain)

    def pause_receiving(self) -> None:
        self._receiving_paused = True

    def resume_receiving(self) -> None:
        self._receiving_paused = False
        self._schedule_drain()

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._closed or self._receiving_paused or not self._incoming.frames:
            return
        assert self._handler is not None
        frames = self.receive()
        try:
            self._handler.on_frames(self, frames)
        except Exception as error:  # contained, as by every link (link.py)
            handler_failed("on_frames", self.peer, error)
        self._schedule_drain()

    def _maybe_writable(self) -> None:
        blocked = self._blocked_bytes
        if blocked is None or self._scheduler is None or self._writable_scheduled:
            return
        if self._outgoing.space.fits(blocked):
            self._writable_scheduled = True
            self._scheduler.call_soon(self._fire_writable)

    def _fire_writable(self) -> None:
        self._writable_scheduled = False
        if self._closed or self._broken is not None or self._blocked_bytes is None:
            return
        self._blocked_bytes = None
        assert self._handler is not None
        try:
            self._handler.on_writable(self)
        except Exception as error:
            handler_failed("on_writable", self.peer, error)


def sim_link_pair(
    capacity: int = limits.RING_BYTES_MIN * 4, *, peers: tuple[int, int] = (0, 1)
) -> tuple[SimLink, SimLink]:
    """Worker peers[0]'s end (linked to peers[1]) and worker peers[1]'s end."""
    a_to_b = _Direction(capacity)
    b_to_a = _Direction(capacity)
    a = SimLink(peer=peers[1], outgoing=a_to_b, incoming=b_to_a)
    b = SimLink(peer=peers[0], outgoing=b_to_a, incoming=a_to_b)
    a._other = b
    b._other = a
    return a, b
