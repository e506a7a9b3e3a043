"""Frames on a link and the space arithmetic every local link shares.

A frame is `(kind, payload)`. On a ring, and on the socketpair stream, it is the record
`[len u32][kind u32][payload padded to 8]` (little-endian). Kind 0 is reserved for the transport
itself (the ring's wrap marker, the socketpair's credit); callers use the kinds of `FrameKind`.

`RingSpace` is the position arithmetic of native/ring.c without the memory: byte counters `head`
and `tail`, power-of-two capacity, a record that does not fit before the end of the region skips
to offset 0. The socketpair fallback and the simulated link account their in-flight bytes with it,
so every local link is full at exactly the same point as the shared-memory ring.
"""

from __future__ import annotations

import enum
import struct

from appliance import limits

Frame = tuple[int, bytes]  # (kind, payload); kind is a plain int, compare with FrameKind members

RECORD_HEADER = struct.Struct("<II")  # len, kind
RECORD_HEADER_BYTES = RECORD_HEADER.size
KIND_RESERVED = 0  # wrap marker on a ring, credit on a socketpair
KIND_MAX = 2**32 - 1


class FrameKind(enum.IntEnum):
    """What a frame carries between workers. Append-only: values are on the wire between processes."""

    HELLO = 1  # u64 pid (may be empty): a worker (re)started; the peer resets what it knows of it
    PING = 2
    PONG = 3
    INTEREST_ADD = 4  # the sender has a subscription (subject, queue) in an account
    INTEREST_REMOVE = 5
    MESSAGE = 6  # a NATS message to deliver on the receiver's side
    INTEREST_RESET = 7  # forget all interest the sender announced before; a full set follows
    MONITOR_REQUEST = 8  # JSON {"id": n}: send your monitoring snapshot
    MONITOR_REPLY = 9  # JSON {"id": n, "snapshot": {...}}
    INTEREST_ACK = 10  # u64: the sender applied our interest changes up to this sequence number
    INTEREST_SYNCED = 11  # u64 pid: the whole interest set after INTEREST_RESET is complete (answers HELLO)


def record_bytes(payload_bytes: int) -> int:
    """Bytes one record occupies: header plus payload padded to 8."""
    assert payload_bytes >= 0
    return RECORD_HEADER_BYTES + ((payload_bytes + 7) & ~7)


def frame_bytes_max(capacity: int) -> int:
    """The largest payload a link of `capacity` bytes carries: any such frame fits an empty ring."""
    return min(limits.FRAME_BYTES_MAX, capacity // 4)


def check_capacity(capacity: int) -> None:
    assert capacity & (capacity - 1) == 0, "ring capacity must be a power of two"
    assert limits.RING_BYTES_MIN <= capacity <= 2**31


class RingSpace:
    """Byte counters of one direction of a link; the producer pushes, the consumer pops."""

    __slots__ = ("_mask", "capacity", "head", "tail")

    def __init__(self, capacity: int) -> None:
        check_capacity(capacity)
        self.capacity = capacity
        self._mask = capacity - 1
        self.head = 0
        self.tail = 0

    def try_push(self, payload_bytes: int) -> bool:
        """fits + push in one step (the fallbacks' hot path): False when the record does not fit."""
        record = RECORD_HEADER_BYTES + ((payload_bytes + 7) & ~7)
        head = self.head
        left = self.capacity - (head & self._mask)
        need = left + record if left < record else record
        if head + need - self.tail > self.capacity:
            return False
        self.head = head + need
        return True

    def _skip(self, position: int, record: int) -> int:
        left = self.capacity - (position & (self.capacity - 1))
        return left if left < record else 0

    def need(self, payload_bytes: int) -> int:
        """Bytes a push of `payload_bytes` takes now, wrap skip included."""
        record = record_bytes(payload_bytes)
        return self._skip(self.head, record) + record

    def fits(self, payload_bytes: int) -> bool:
        return self.head + self.need(payload_bytes) - self.tail <= self.capacity

    def push(self, payload_bytes: int) -> int:
        """Accounts one record; returns the bytes skipped before it (a wrap)."""
        assert self.fits(payload_bytes)
        record = record_bytes(payload_bytes)
        skip = self._skip(self.head, record)
        self.head += skip + record
        return skip

    def pop(self, payload_bytes: int) -> None:
        """Frees the oldest record, which has `payload_bytes` of payload."""
        record = RECORD_HEADER_BYTES + ((payload_bytes + 7) & ~7)
        tail = self.tail
        left = self.capacity - (tail & self._mask)
        self.tail = tail + (left + record if left < record else record)
        assert self.tail <= self.head

    @property
    def fill(self) -> int:
        return self.head - self.tail
