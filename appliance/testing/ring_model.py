"""A pure-Python reference model of native/ring.c, byte for byte, for differential tests.

Single-threaded and written independently of appliance.fabric.frames: the same push/pop schedule
applied to the C ring and to this model must give the same results, the same counters and the
same data bytes. It is not a transport (no atomics): see appliance/fabric/socketpair.py for that.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("<II")  # len, kind
WRAP = 0


class RingModel:
    def __init__(self, capacity: int) -> None:
        assert capacity >= 64 and capacity & (capacity - 1) == 0
        self.capacity = capacity
        self.frame_bytes_max = capacity // 4
        self.data = bytearray(capacity)
        self.head = 0
        self.tail = 0

    @staticmethod
    def record_bytes(length: int) -> int:
        return 8 + (length + 7) // 8 * 8

    def push(self, kind: int, payload: bytes) -> bool:
        assert kind != WRAP
        assert len(payload) <= self.frame_bytes_max
        offset = self.head % self.capacity
        record = self.record_bytes(len(payload))
        room_before_end = self.capacity - offset
        skip = room_before_end if room_before_end < record else 0
        if self.head + skip + record - self.tail > self.capacity:
            return False
        if skip:
            HEADER.pack_into(self.data, offset, 0, WRAP)
            offset = 0
        HEADER.pack_into(self.data, offset, len(payload), kind)
        body = payload + bytes(record - 8 - len(payload))
        self.data[offset + 8 : offset + record] = body
        self.head += skip + record
        return True

    def pop(self, frames_max: int, bytes_max: int) -> list[tuple[int, bytes]]:
        """Up to frames_max frames; stops before exceeding bytes_max, but always takes one."""
        frames: list[tuple[int, bytes]] = []
        total = 0
        while len(frames) < frames_max and self.tail < self.head:
            position = self.tail
            length, kind = HEADER.unpack_from(self.data, position % self.capacity)
            if kind == WRAP:  # the record is at the start of the region
                position += self.capacity - position % self.capacity
                length, kind = HEADER.unpack_from(self.data, 0)
            if frames and total + length > bytes_max:
                break  # a wrap marker before it stays unread too
            offset = position % self.capacity
            frames.append((kind, bytes(self.data[offset + 8 : offset + 8 + length])))
            total += length
            self.tail = position + self.record_bytes(length)
        return frames

    def would_fit(self, length: int) -> bool:
        offset = self.head % self.capacity
        record = self.record_bytes(length)
        skip = self.capacity - offset if self.capacity - offset < record else 0
        return self.head + skip + record - self.tail <= self.capacity
