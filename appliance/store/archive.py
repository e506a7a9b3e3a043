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

from collections.abc import Callable
from typing import NamedTuple

from appliance.errors import CorruptData
from appliance.store import s2frame

MAGIC = b"NATSARC1"
NAME_BYTES_MAX = 1 << 20  # as nats-server's reader
ENTRY_BYTES_MAX = 64 << 20  # a message is at most max_payload (64 MiB is nats-server's ceiling)
STATE_NAME = "state.json"
CONSUMER_PREFIX = "consumers/"


class Entry(NamedTuple):
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


def _read_uvarint(buffer: bytes | bytearray, pos: int) -> tuple[int, int] | None:
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
            raise ValueError("archive: varint overflows 64 bits")
    return None


EntryTuple = tuple[str, int, int, int, int, bytes]


def archive_entries_py(
    buffer: bytes | bytearray, pos: int, name_max: int, entry_max: int
) -> tuple[list[EntryTuple], int]:
    """Whole entries from pos, stopping after the end entry or at an incomplete one; ValueError
    for damage. The reference of native/s2.c's archive_entries."""
    out: list[EntryTuple] = []
    while pos < len(buffer):
        at = pos
        values: list[int] = []
        for _ in range(5):
            got = _read_uvarint(buffer, at)
            if got is None:
                return out, pos
            value, at = got
            values.append(value)
        name_len, zigzag, seq, header_size, payload_size = values
        if name_len > name_max or header_size + payload_size > entry_max:
            raise ValueError("archive: entry larger than allowed")
        end = at + name_len + header_size + payload_size
        if end > len(buffer):
            return out, pos
        try:
            name = bytes(buffer[at : at + name_len]).decode()
        except UnicodeDecodeError:
            raise ValueError("archive: entry name is not UTF-8") from None
        timestamp = (zigzag >> 1) ^ -(zigzag & 1)
        out.append((name, timestamp, seq, header_size, payload_size, bytes(buffer[at + name_len : end])))
        pos = end
        if not name_len and not zigzag and not seq and end == at:
            break
    return out, pos


_native = s2frame.NATIVE
archive_entries: Callable[[bytes | bytearray, int, int, int], tuple[list[EntryTuple], int]] = (
    _native.archive_entries if _native is not None else archive_entries_py
)


class ArchiveReader:
    """Push parser of an archive stream (module doc)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._magic = False
        self.ended = False

    def feed(self, data: bytes) -> list[Entry]:
        buffer = self._buffer
        buffer += data
        pos = 0
        if not self._magic:
            if len(buffer) < len(MAGIC):
                return []
            if bytes(buffer[: len(MAGIC)]) != MAGIC:
                raise CorruptData("not a stream backup archive (no NATSARC1 magic)")
            self._magic = True
            pos = len(MAGIC)
        if self.ended and pos < len(buffer):
            raise CorruptData("archive: data after the end-of-backup entry")
        try:
            found, pos = archive_entries(buffer, pos, NAME_BYTES_MAX, ENTRY_BYTES_MAX)
        except ValueError as exc:
            raise CorruptData(str(exc)) from None
        out = [Entry(*item) for item in found]
        if out and out[-1].is_end:
            self.ended = True
            if pos < len(buffer):
                raise CorruptData("archive: data after the end-of-backup entry")
        del buffer[:pos]
        return out

    def finish(self) -> None:
        if not self.ended:
            raise CorruptData("backup was truncated")
