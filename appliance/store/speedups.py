"""Store hot paths: C (native/store.c) when appliance._native is in use, else the Python twins.

native/store.c is linked into appliance._native as its own module `_store_native`; it is loaded
from the same shared object here, once, at import. appliance.native decides whether native
code is used at all (APPLIANCE_NO_NATIVE=1 forces the twins). tests/store/test_speedups.py
checks that both give identical results.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import struct
import sys
import zlib
from array import array
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from appliance import limits, native
from appliance.store import records, segment

T = TypeVar("T")
Encoded = tuple[bytes, list[int], list[int], list[int]]


def encode_msgs_py(msgs: list[tuple[str, bytes, bytes, int]], first_seq: int, base_offset: int) -> Encoded:
    """MSG records for first_seq, first_seq+1, ...: (buffer, offsets, nats-server sizes, times)."""
    pack = records.BODY_HEAD.pack
    frame = records.FRAME.pack
    crc32 = zlib.crc32
    parts: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    times: list[int] = []
    position = base_offset
    seq = first_seq
    for subject, headers, payload, timestamp_ns in msgs:
        subject_bytes = subject.encode()
        if len(subject_bytes) > limits.STORE_SUBJECT_BYTES_MAX:
            raise ValueError("subject longer than 65535 bytes")
        if records.BODY_HEAD.size + len(subject_bytes) + len(headers) + len(payload) > limits.STORE_RECORD_BYTES_MAX:
            raise ValueError("record larger than STORE_RECORD_BYTES_MAX")
        body = b"".join(
            (pack(1, seq, timestamp_ns, len(subject_bytes), len(headers), len(payload)), subject_bytes, headers, payload)
        )
        length = len(body)
        parts.append(frame(length, crc32(body, length)))
        parts.append(body)
        offsets.append(position)
        position += length + 8
        sizes.append((30 if not headers else 34 + len(headers)) + len(subject_bytes) + len(payload))
        times.append(timestamp_ns)
        seq += 1
    return b"".join(parts), offsets, sizes, times


def block_msgs_py(raw: bytes, start_seq: int, factory: Callable[[int, str, bytes, bytes, int], T]) -> list[T]:
    """Messages (seq >= start_seq) of a decoded, already verified block."""
    found: list[T] = []
    unpack = records.RECORD_HEAD.unpack_from
    offset = 0
    while offset < len(raw):
        length, _crc, kind, seq, ts, subject_len, headers_len, payload_len = unpack(raw, offset)
        end = offset + 8 + length
        if records.BODY_HEAD.size + subject_len + headers_len + payload_len != length or end > len(raw):
            raise ValueError(f"malformed record in block at {offset}")
        if kind == records.Kind.MSG and seq >= start_seq:
            s = offset + records.HEAD_BYTES
            h = s + subject_len
            p = h + headers_len
            found.append(factory(seq, raw[s:h].decode(), raw[h:p], raw[p:end], ts))
        offset = end
    return found


# (offset, end, kind, seq, timestamp_ns, subject or None, nats-server accounted size)
Replayed = tuple[int, int, int, int, int, "str | None", int]


def replay_frames_py(buf: bytes | memoryview, start: int, check: bool) -> tuple[list[Replayed], int]:
    """Whole valid records from start with their subject (MSG only) and accounted size."""
    found: list[Replayed] = []
    unpack = records.RECORD_HEAD.unpack_from
    body_head = records.BODY_HEAD.size
    offset = start
    size = len(buf)
    while offset + records.HEAD_BYTES <= size:
        length, crc, kind, seq, ts, subject_len, headers_len, payload_len = unpack(buf, offset)
        end = offset + 8 + length
        if (
            end > size
            or body_head + subject_len + headers_len + payload_len != length
            or kind not in (1, 2, 3)
            or (check and zlib.crc32(buf[offset + 8 : end], length) != crc)
        ):
            break
        subject: str | None = None
        accounted = 0
        if kind == records.Kind.MSG:
            try:
                subject = bytes(buf[offset + records.HEAD_BYTES : offset + records.HEAD_BYTES + subject_len]).decode()
            except UnicodeDecodeError:
                break
            accounted = 30 + subject_len + payload_len + (4 + headers_len if headers_len else 0)
        found.append((offset, end, kind, seq, ts, subject, accounted))
        offset = end
    return found, offset


def find_msg_py(raw: bytes, seq: int) -> int:
    """Offset of the MSG record with this seq in a verified block, or -1."""
    unpack = records.RECORD_HEAD.unpack_from
    offset = 0
    while offset + records.HEAD_BYTES <= len(raw):
        length, _crc, kind, record_seq, _ts, _sl, _hl, _pl = unpack(raw, offset)
        if kind == records.Kind.MSG and record_seq == seq:
            return offset
        offset += 8 + length
    return -1


MSG_INDEX = struct.Struct("<QQ")  # (seq, offset) per MSG record of a block: msg_index


def msg_index_py(raw: bytes) -> bytes:
    """(seq, offset) pairs of the MSG records of a verified block, ascending seq (see index_find)."""
    unpack = records.RECORD_HEAD.unpack_from
    pairs: list[bytes] = []
    offset = 0
    while offset + records.HEAD_BYTES <= len(raw):
        length, _crc, kind, seq, _ts, _sl, _hl, _pl = unpack(raw, offset)
        if kind == records.Kind.MSG:
            pairs.append(MSG_INDEX.pack(seq, offset))
        offset += 8 + length
    return b"".join(pairs)


def index_find_py(index: bytes, seq: int) -> int:
    """The offset msg_index recorded for seq, or -1 (binary search)."""
    lo, hi = 0, len(index) // MSG_INDEX.size
    while lo < hi:
        mid = (lo + hi) // 2
        at, offset = MSG_INDEX.unpack_from(index, mid * MSG_INDEX.size)
        if at == seq:
            return int(offset)
        if at < seq:
            lo = mid + 1
        else:
            hi = mid
    return -1


def msg_at_py(
    raw: bytes, offset: int, factory: Callable[[int, str, bytes, bytes, int], T], check: bool = False
) -> T:
    """The MSG record at offset (checksum verified if check); ValueError if there is none."""
    try:
        if offset < 0:
            raise records.BadRecord(f"negative offset {offset}")
        record = records.decode_at(raw, offset, check=check)
    except (records.BadRecord, struct.error) as exc:
        raise ValueError(f"no MSG record at {offset}") from exc
    if record.kind != records.Kind.MSG:
        raise ValueError(f"no MSG record at {offset}")
    return factory(record.seq, record.subject, record.headers, record.payload, record.timestamp_ns)


# msg_columns: (seqs, stamps, subject_offsets, subjects, payload_offsets, payloads, header_spans,
# others, stop) - little-endian i64 / i32 column buffers, see native/store.c
Columns = tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, int]


def msg_columns_py(buf: bytes | memoryview, start: int, check: bool) -> Columns:
    """The MSG records among the whole valid records from start (crc checked when check) as column
    buffers: i64 seqs and stamps, i32 Arrow offsets and the values back to back for subjects and
    payloads, (row, offset, length) i64 triples of the messages with headers, i64 offsets of the
    other records, and where the valid records stop."""
    if start < 0 or start > len(buf):
        raise ValueError("start outside the buffer")
    unpack = records.RECORD_HEAD.unpack_from
    seqs, stamps, others, spans = array("q"), array("q"), array("q"), array("q")
    subject_offsets, payload_offsets = array("i", [0]), array("i", [0])
    subjects: list[bytes] = []
    payloads: list[bytes] = []
    subject_at = payload_at = 0
    offset = start
    while offset + records.HEAD_BYTES <= len(buf):
        length, crc, kind, seq, ts, subject_len, headers_len, payload_len = unpack(buf, offset)
        end = offset + 8 + length
        if (
            end > len(buf)
            or records.BODY_HEAD.size + subject_len + headers_len + payload_len != length
            or kind not in (1, 2, 3)
            or (check and zlib.crc32(buf[offset + 8 : end], length) != crc)
        ):
            break
        if kind != records.Kind.MSG:
            others.append(offset)
            offset = end
            continue
        s = offset + records.HEAD_BYTES
        if headers_len:
            spans.extend((len(seqs), s + subject_len, headers_len))
        seqs.append(seq)
        stamps.append(ts)
        subjects.append(bytes(buf[s : s + subject_len]))
        payloads.append(bytes(buf[end - payload_len : end]))
        subject_at += subject_len
        payload_at += payload_len
        offset = end
        subject_offsets.append(min(subject_at, 0x7FFFFFFF))  # past 2 GiB: the ValueError below
        payload_offsets.append(min(payload_at, 0x7FFFFFFF))
    stop = offset
    if subject_at > 0x7FFFFFFF or payload_at > 0x7FFFFFFF:
        raise ValueError("more than 2 GiB of subjects or payloads in one buffer")
    if sys.byteorder != "little":
        for column in (seqs, stamps, others, spans, subject_offsets, payload_offsets):
            column.byteswap()
    return (seqs.tobytes(), stamps.tobytes(), subject_offsets.tobytes(), b"".join(subjects),
            payload_offsets.tobytes(), b"".join(payloads), spans.tobytes(), others.tobytes(), stop)


def _load_native() -> ModuleType | None:
    if not native.ENABLED or native.speedups is None:
        return None
    path = getattr(native.speedups, "__file__", None)
    if path is None:
        return None
    loader = importlib.machinery.ExtensionFileLoader("appliance._store_native", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    if spec is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError:  # an older build without native/store.c
        return None
    return module


_native = _load_native()
ENABLED = _native is not None

encode_msgs: Callable[[list[tuple[str, bytes, bytes, int]], int, int], Encoded]
scan_frames: Callable[[bytes | memoryview, int], tuple[list[records.Frame], int]]
block_msgs: Callable[..., list[object]]
find_msg: Callable[[bytes, int], int]
msg_index: Callable[[bytes], bytes]
index_find: Callable[[bytes, int], int]
msg_at: Callable[..., object]
replay_frames: Callable[[bytes | memoryview, int, bool], tuple[list[Replayed], int]]
plan_blocks: Callable[[bytes | memoryview, int, int], tuple[list[segment.BlockPlan], int]]
msg_columns: Callable[[bytes | memoryview, int, bool], Columns]
if _native is not None:
    assert _native.RECORD_BYTES_MAX == limits.STORE_RECORD_BYTES_MAX, "native/store.c disagrees with limits.py"
    plan_blocks = _native.plan_blocks
    replay_frames = _native.replay_frames
    find_msg = _native.find_msg
    msg_index = _native.msg_index
    index_find = _native.index_find
    msg_at = _native.msg_at
    encode_msgs = _native.encode_msgs
    scan_frames = _native.scan_frames
    block_msgs = _native.block_msgs
    msg_columns = _native.msg_columns
else:
    encode_msgs = encode_msgs_py
    scan_frames = records.scan_frames
    block_msgs = block_msgs_py
    find_msg = find_msg_py
    msg_index = msg_index_py
    index_find = index_find_py
    msg_at = msg_at_py
    replay_frames = replay_frames_py
    plan_blocks = segment.plan_blocks
    msg_columns = msg_columns_py
