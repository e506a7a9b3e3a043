"""Record framing shared by active segments, sealed blocks and snapshots (pure encode/decode).

    frame  = body_len u32 | crc u32 | body            (little-endian)
    body   = kind u8 | seq u64 | ts i64 | subject_len u16 | headers_len u32 | payload_len u32
             | subject | headers | payload
    crc    = zlib.crc32(body) seeded with body_len, so a damaged length cannot pass as valid

Kinds (append-only, on disk): MSG stores a message; DELETE removes sequences (payload is packed
u64 pairs `first, last`, inclusive); FIRST removes everything below `seq` (purge all, compact).
DELETE and FIRST carry in `ts` the stream's last timestamp when they were written, so the state
survives even when the last message's own record is gone (sealing drops dead records).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from appliance import limits

FRAME = struct.Struct("<II")
BODY_HEAD = struct.Struct("<BQqHII")
RECORD_HEAD = struct.Struct("<IIBQqHII")
RANGE = struct.Struct("<QQ")
HEAD_BYTES = RECORD_HEAD.size
assert HEAD_BYTES == 35


class Kind(IntEnum):
    MSG = 1
    DELETE = 2
    FIRST = 3


class BadRecord(Exception):
    """The bytes at this offset are not a whole valid record (torn, truncated or damaged)."""


@dataclass(frozen=True, slots=True)
class Record:
    kind: Kind
    seq: int
    timestamp_ns: int
    subject: str
    headers: bytes
    payload: bytes
    offset: int
    end: int

    def ranges(self) -> list[tuple[int, int]]:
        assert self.kind == Kind.DELETE
        return [RANGE.unpack_from(self.payload, i) for i in range(0, len(self.payload), RANGE.size)]


def encode_msg(seq: int, subject: bytes, headers: bytes, payload: bytes, timestamp_ns: int) -> bytes:
    if len(subject) > limits.STORE_SUBJECT_BYTES_MAX:
        raise ValueError("subject longer than 65535 bytes")
    if BODY_HEAD.size + len(subject) + len(headers) + len(payload) > limits.STORE_RECORD_BYTES_MAX:
        raise ValueError("record larger than STORE_RECORD_BYTES_MAX")
    body = BODY_HEAD.pack(Kind.MSG, seq, timestamp_ns, len(subject), len(headers), len(payload))
    body += subject + headers + payload
    length = len(body)
    return FRAME.pack(length, zlib.crc32(body, length)) + body


def encode_delete(ranges: list[tuple[int, int]], last_ts_ns: int = 0) -> bytes:
    """Remove the inclusive ranges; ts carries the stream's last timestamp at that moment."""
    assert ranges
    payload = b"".join(RANGE.pack(first, last) for first, last in ranges)
    body = BODY_HEAD.pack(Kind.DELETE, ranges[-1][1], last_ts_ns, 0, 0, len(payload)) + payload
    return FRAME.pack(len(body), zlib.crc32(body, len(body))) + body


def encode_first(seq: int, last_ts_ns: int = 0) -> bytes:
    """Remove everything below seq; ts carries the stream's last timestamp at that moment."""
    body = BODY_HEAD.pack(Kind.FIRST, seq, last_ts_ns, 0, 0, 0)
    return FRAME.pack(len(body), zlib.crc32(body, len(body))) + body


def to_ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted sequences as inclusive (first, last) ranges of consecutive numbers."""
    ranges: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if ranges and ranges[-1][1] + 1 == seq:
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    return ranges


def decode_at(buf: bytes | memoryview, offset: int, *, check: bool = True) -> Record:
    """The record starting at offset; BadRecord if it is short, damaged or malformed."""
    if offset + HEAD_BYTES > len(buf):
        raise BadRecord(f"short header at {offset}")
    length, crc, kind, seq, ts, subject_len, headers_len, payload_len = RECORD_HEAD.unpack_from(buf, offset)
    end = offset + FRAME.size + length
    if length > limits.STORE_RECORD_BYTES_MAX or end > len(buf):
        raise BadRecord(f"bad length {length} at {offset}")
    if check and zlib.crc32(buf[offset + FRAME.size : end], length) != crc:
        raise BadRecord(f"checksum mismatch at {offset}")
    if BODY_HEAD.size + subject_len + headers_len + payload_len != length or kind not in _KINDS:
        raise BadRecord(f"malformed record at {offset}")
    start = offset + HEAD_BYTES
    subject_end = start + subject_len
    headers_end = subject_end + headers_len
    try:
        subject = bytes(buf[start:subject_end]).decode()
    except UnicodeDecodeError as exc:
        raise BadRecord(f"subject is not utf-8 at {offset}") from exc
    return Record(
        Kind(kind), seq, ts, subject, bytes(buf[subject_end:headers_end]), bytes(buf[headers_end:end]), offset, end
    )


_KINDS = frozenset(int(k) for k in Kind)


def decode_all(buf: bytes | memoryview, start: int = 0) -> tuple[list[Record], int]:
    """Every whole valid record from start; returns them and the offset where parsing stopped."""
    found: list[Record] = []
    offset = start
    while offset < len(buf):
        try:
            record = decode_at(buf, offset)
        except BadRecord:
            break
        found.append(record)
        offset = record.end
    return found, offset


# (offset, end, kind, seq, timestamp_ns) of one record inside a buffer
Frame = tuple[int, int, int, int, int]


def scan_frames(buf: bytes | memoryview, start: int = 0) -> tuple[list[Frame], int]:
    """Every whole valid record from start as a Frame, without building Record objects.

    The fast path for sealing and block indexing; checks each record's checksum and lengths.
    Returns the frames and the offset where parsing stopped.
    """
    found: list[Frame] = []
    unpack = RECORD_HEAD.unpack_from
    crc32 = zlib.crc32
    body_head = BODY_HEAD.size
    offset = start
    size = len(buf)
    while offset + HEAD_BYTES <= size:
        length, crc, kind, seq, ts, subject_len, headers_len, payload_len = unpack(buf, offset)
        end = offset + 8 + length
        if (
            end > size
            or body_head + subject_len + headers_len + payload_len != length
            or kind not in _KINDS
            or crc32(buf[offset + 8 : end], length) != crc
        ):
            break
        found.append((offset, end, kind, seq, ts))
        offset = end
    return found, offset


def resync(buf: bytes | memoryview, start: int, min_seq: int = 0) -> int | None:
    """Where the record chain safely resumes after the damaged record at start, or None.

    A candidate is a whole record with a valid checksum (seeded with its length, so a length read
    from damaged bytes cannot pass), a known kind and, for a message, a sequence of at least
    min_seq (messages only move forward). Where the damaged record's header plausibly names
    message min_seq and its length leads to message min_seq + 1 (or to a removal record), the
    chain resumes there without looking inside its bytes. Otherwise the bytes are scanned. A payload may hold record bytes (a forged record), so a candidate is
    *strong* when the record after it is valid too (or the end, or zeros) with a higher sequence,
    else *weak*; the earliest strong one is taken, unless a weak one comes first with a lower
    sequence (an intact record between two damaged ones is kept). A candidate never reuses the
    sequence the damaged record's header names when that header is plausible.
    """
    size = len(buf)
    floor = min_seq
    if start + HEAD_BYTES <= size and buf[start + FRAME.size] == Kind.MSG:
        named = int.from_bytes(buf[start + FRAME.size + 1 : start + FRAME.size + 9], "little")
        if named == min_seq:
            floor = min_seq + 1  # the damaged record is that message: nothing else may claim it
            hinted = _declared_end(buf, start)
            record = _candidate(buf, hinted, floor) if hinted is not None else None
            # its length led to the very next message (or a removal record): its bytes were the damage
            leads_on = record is not None and (record.kind != Kind.MSG or record.seq == floor)
            if hinted is not None and record is not None and leads_on and _strong(buf, hinted, record):
                return hinted
    weak: tuple[int, Record] | None = None
    offset = start
    while True:
        offset += 1
        if offset + HEAD_BYTES > size:
            return None if weak is None else weak[0]
        record = _candidate(buf, offset, floor)
        if record is None:
            continue
        if not _strong(buf, offset, record):
            if weak is None:
                weak = (offset, record)
            continue
        if weak is not None and (weak[1].kind != Kind.MSG or record.kind != Kind.MSG or weak[1].seq < record.seq):
            return weak[0]
        return offset


def _declared_end(buf: bytes | memoryview, offset: int) -> int | None:
    """Where the record at offset ends by its (unverified) length field, if inside the buffer."""
    if offset + FRAME.size > len(buf):
        return None
    end = offset + FRAME.size + int.from_bytes(buf[offset : offset + 4], "little")
    return end if offset + HEAD_BYTES <= end < len(buf) else None


def _candidate(buf: bytes | memoryview, offset: int, min_seq: int) -> Record | None:
    """The whole valid record at offset (a message at min_seq or later), or None."""
    if offset + HEAD_BYTES > len(buf):
        return None
    length = int.from_bytes(buf[offset : offset + 4], "little")
    if length < BODY_HEAD.size or offset + FRAME.size + length > len(buf) or buf[offset + FRAME.size] not in _KINDS:
        return None
    try:
        record = decode_at(buf, offset)
    except BadRecord:
        return None
    if record.kind == Kind.MSG and record.seq < min_seq:
        return None
    return record


def _strong(buf: bytes | memoryview, offset: int, record: Record | None = None) -> bool:
    """The record at offset is followed by the end, by zeros only, or by another valid record
    (a message after a message has a higher sequence)."""
    if record is None:
        record = decode_at(buf, offset)
    end = record.end
    if end >= len(buf) or bytes(buf[end:]).count(0) == len(buf) - end:
        return True
    after = _candidate(buf, end, record.seq + 1 if record.kind == Kind.MSG else 0)
    return after is not None


# One stretch of damaged bytes in a record chain: [begin, end) and the offset where the chain
# resumes (end), or None when nothing valid follows (end is then the end of the buffer).
Damage = tuple[int, int, int | None]


def damaged_spans(buf: bytes | memoryview, start: int) -> list[Damage]:
    """Every damaged stretch of a record chain from start (records before and after are whole).

    Trailing zero bytes (preallocated, never written) are not damage. Used by verify; recovery
    walks the same way with the sequence bound (resync's min_seq) it knows from the index.
    """
    spans: list[Damage] = []
    offset = start
    size = len(buf)
    while offset < size:
        frames, stop = scan_frames(buf, offset)
        if stop >= size or bytes(buf[stop:]).count(0) == size - stop:
            break
        msg_seqs = [f[3] for f in frames if f[2] == Kind.MSG]
        resume = resync(buf, stop, msg_seqs[-1] + 1 if msg_seqs else 0)
        spans.append((stop, size if resume is None else resume, resume))
        if resume is None:
            break
        offset = resume
    return spans
