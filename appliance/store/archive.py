"""nats-server's stream backup archive (its "v2" snapshot format, server/archive), the content
of a stream snapshot inside the S2 framing (s2frame.py):

    "NATSARC1"
    entries: uvarint name_len | varint timestamp (zig-zag) | uvarint seq | uvarint header_size
             | uvarint payload_size | name | header_size + payload_size bytes

A snapshot is `state.json` (the stream state, with `consumer_count` = the consumer entries that
follow), `consumers/<name>` (JSON: {"config", "state"}), one entry per message (name = subject,
timestamp = stored time in ns, seq, headers then payload), and an all-zero end-of-backup entry.
appliance writes and reads this same format, so a backup moves between appliance and nats-server.

The reader is a push parser: feed() bytes in any pieces, get whole entries out; it holds at
most one entry (bounded by ENTRY_BYTES_MAX).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.errors import CorruptData

MAGIC = b"NATSARC1"
NAME_BYTES_MAX = 1 << 20  # as nats-server's reader
ENTRY_BYTES_MAX = 64 << 20  # a message is at most max_payload (64 MiB is nats-server's ceiling)
STATE_NAME = "state.json"
CONSUMER_PREFIX = "consumers/"


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    timestamp: int
    seq: int
    header_size: int
    payload_size: int
    data: bytes  # headers then payload

    @property
    def is_end(self) -> bool:
        return not self.name and not self.seq and not self.timestamp and not self.data

    @property
    def headers(self) -> bytes:
        return self.data[: self.header_size]

    @property
    def payload(self) -> bytes:
        return self.data[self.header_size :]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint(value: int) -> bytes:
    return _uvarint((value << 1) ^ (value >> 63) if value < 0 else value << 1)


def entry(name: str, timestamp: int, seq: int, headers: bytes, payload: bytes) -> bytes:
    """One encoded entry (the caller writes MAGIC once before the first)."""
    raw_name = name.encode()
    return b"".join(
        (
            _uvarint(len(raw_name)),
            _varint(timestamp),
            _uvarint(seq),
            _uvarint(len(headers)),
            _uvarint(len(payload)),
            raw_name,
            headers,
            payload,
        )
    )


END = entry("", 0, 0, b"", b"")


def _read_uvarint(buffer: bytearray, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when the buffer ends first."""
    value = shift = 0
    while pos < len(buffer):
        byte = buffer[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise CorruptData("archive: varint overflows 64 bits")
    return None


class ArchiveReader:
    """Push parser of an archive stream (module doc)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._magic = False
        self.ended = False

    def feed(self, data: bytes) -> list[Entry]:
        buffer = self._buffer
        buffer += data
        out: list[Entry] = []
        pos = 0
        if not self._magic:
            if len(buffer) < len(MAGIC):
                return out
            if bytes(buffer[: len(MAGIC)]) != MAGIC:
                raise CorruptData("not a stream backup archive (no NATSARC1 magic)")
            self._magic = True
            pos = len(MAGIC)
        while pos < len(buffer):
            if self.ended:
                raise CorruptData("archive: data after the end-of-backup entry")
            parsed = self._head(buffer, pos)
            if parsed is None:
                break
            name_len, timestamp, seq, header_size, payload_size, body = parsed
            end = body + name_len + header_size + payload_size
            if end > len(buffer):
                break
            name_end = body + name_len
            try:
                name = bytes(buffer[body:name_end]).decode()
            except UnicodeDecodeError:
                raise CorruptData("archive: entry name is not UTF-8") from None
            item = Entry(name, timestamp, seq, header_size, payload_size, bytes(buffer[name_end:end]))
            out.append(item)
            pos = end
            if item.is_end:
                self.ended = True
        del buffer[:pos]
        return out

    @staticmethod
    def _head(buffer: bytearray, pos: int) -> tuple[int, int, int, int, int, int] | None:
        values: list[int] = []
        for _ in range(5):
            got = _read_uvarint(buffer, pos)
            if got is None:
                return None
            value, pos = got
            values.append(value)
        name_len, zigzag, seq, header_size, payload_size = values
        timestamp = (zigzag >> 1) ^ -(zigzag & 1)
        if name_len > NAME_BYTES_MAX or header_size + payload_size > ENTRY_BYTES_MAX:
            raise CorruptData("archive: entry larger than allowed")
        return name_len, timestamp, seq, header_size, payload_size, pos

    def finish(self) -> None:
        if not self.ended:
            raise CorruptData("backup was truncated")
