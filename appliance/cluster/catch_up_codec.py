"""Wire encoding of stream catch-up requests and replies (little endian, versioned). Pure.

A replica that installed its leader's snapshot asks for the stored messages it lacks
(cluster/catch_up.py carries these bytes over the routes):

    request  = [u8 version=1][u64 from_seq][u64 to_seq][u32 max_msgs][u32 max_bytes][u32 part_offset]
    reply    = [u8 version=1][u8 status] body
      MSGS         body = [u32 n] n x msg              (ascending seqs, n <= max_msgs)
      PART         body = part                          (one message too big for one reply)
      UNAVAILABLE  body = empty                         (this replica does not hold the range)
    msg      = [u64 seq][i64 ts][u16 subject_len][u32 headers_len][u32 payload_len] subject headers payload
    part     = [u64 seq][i64 ts][u16 subject_len][u32 headers_len][u32 payload_len][u32 offset][u32 chunk_len]
               subject chunk              (chunk: bytes [offset, offset+chunk_len) of headers+payload)

`part_offset` > 0 asks for the rest of message `from_seq` from that byte on. Every decode error
(short, long, bad version, unknown status, non-UTF-8 subject, descending seqs, a part outside its
message) raises CorruptData: the bytes come from the network and are never trusted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from appliance.errors import CorruptData
from appliance.store.api import StoredMsg

VERSION = 1
REQUEST = struct.Struct("<BQQIII")
REPLY_HEAD = struct.Struct("<BB")
COUNT = struct.Struct("<I")
MSG_HEAD = struct.Struct("<QqHII")
PART_TAIL = struct.Struct("<II")
REPLY_HEAD_BYTES = REPLY_HEAD.size + COUNT.size
MSG_HEAD_BYTES = MSG_HEAD.size
PART_HEAD_BYTES = REPLY_HEAD.size + MSG_HEAD.size + PART_TAIL.size
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


class Status(IntEnum):
    MSGS = 0
    PART = 1
    UNAVAILABLE = 2


@dataclass(frozen=True, slots=True)
class Request:
    from_seq: int
    to_seq: int
    max_msgs: int
    max_bytes: int
    part_offset: int = 0


@dataclass(frozen=True, slots=True)
class Part:
    """Bytes [offset, offset + len(chunk)) of one message's headers + payload."""

    seq: int
    timestamp_ns: int
    subject: str
    headers_len: int
    payload_len: int
    offset: int
    chunk: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    status: Status
    msgs: tuple[StoredMsg, ...] = ()
    part: Part | None = None


def encode_request(request: Request) -> bytes:
    assert 0 < request.from_seq <= request.to_seq <= U64_MAX
    return REQUEST.pack(VERSION, request.from_seq, request.to_seq, request.max_msgs, request.max_bytes,
                        request.part_offset)


def decode_request(data: bytes) -> Request:
    if len(data) != REQUEST.size:
        raise CorruptData(f"catch-up request of {len(data)} bytes, not {REQUEST.size}")
    version, from_seq, to_seq, max_msgs, max_bytes, part_offset = REQUEST.unpack(data)
    if version != VERSION:
        raise CorruptData(f"catch-up request version {version}")
    if not 0 < from_seq <= to_seq:
        raise CorruptData(f"catch-up request for [{from_seq}, {to_seq}]")
    if max_msgs == 0 or max_bytes == 0:
        raise CorruptData("catch-up request for nothing")
    return Request(from_seq, to_seq, max_msgs, max_bytes, part_offset)


def msg_bytes(msg: StoredMsg) -> int:
    """Encoded size of one message in a MSGS reply."""
    return MSG_HEAD_BYTES + len(msg.subject.encode()) + len(msg.headers) + len(msg.payload)


def encode_msgs(msgs: list[StoredMsg]) -> bytes:
    parts = [REPLY_HEAD.pack(VERSION, Status.MSGS), COUNT.pack(len(msgs))]
    for msg in msgs:
        subject = msg.subject.encode()
        head = MSG_HEAD.pack(msg.seq, msg.timestamp_ns, len(subject), len(msg.headers), len(msg.payload))
        parts.append(head)
        parts += (subject, msg.headers, msg.payload)
    return b"".join(parts)


def encode_part(part: Part) -> bytes:
    subject = part.subject.encode()
    return b"".join((
        REPLY_HEAD.pack(VERSION, Status.PART),
        MSG_HEAD.pack(part.seq, part.timestamp_ns, len(subject), part.headers_len, part.payload_len),
        PART_TAIL.pack(part.offset, len(part.chunk)),
        subject,
        part.chunk,
    ))


def encode_unavailable() -> bytes:
    return REPLY_HEAD.pack(VERSION, Status.UNAVAILABLE)


def decode_reply(data: bytes) -> Reply:
    if len(data) < REPLY_HEAD.size:
        raise CorruptData("catch-up reply shorter than its header")
    version, status = REPLY_HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptData(f"catch-up reply version {version}")
    if status == Status.UNAVAILABLE:
        if len(data) != REPLY_HEAD.size:
            raise CorruptData("catch-up UNAVAILABLE reply with a body")
        return Reply(Status.UNAVAILABLE)
    if status == Status.MSGS:
        return Reply(Status.MSGS, msgs=_decode_msgs(data, REPLY_HEAD.size))
    if status == Status.PART:
        return Reply(Status.PART, part=_decode_part(data, REPLY_HEAD.size))
    raise CorruptData(f"catch-up reply status {status}")


def _decode_msgs(data: bytes, pos: int) -> tuple[StoredMsg, ...]:
    if len(data) < pos + COUNT.size:
        raise CorruptData("catch-up reply without its count")
    (count,) = COUNT.unpack_from(data, pos)
    pos += COUNT.size
    if count * MSG_HEAD_BYTES > len(data) - pos:
        raise CorruptData(f"catch-up reply claims {count} messages in {len(data)} bytes")
    msgs: list[StoredMsg] = []
    previous = 0
    for _ in range(count):
        if len(data) < pos + MSG_HEAD_BYTES:
            raise CorruptData("catch-up message header cut short")
        seq, ts, subject_len, headers_len, payload_len = MSG_HEAD.unpack_from(data, pos)
        pos += MSG_HEAD_BYTES
        end = pos + subject_len + headers_len + payload_len
        if end > len(data):
            raise CorruptData("catch-up message cut short")
        if seq <= previous:
            raise CorruptData(f"catch-up sequence {seq} after {previous}")
        previous = seq
        subject = _subject(data[pos : pos + subject_len])
        headers = data[pos + subject_len : pos + subject_len + headers_len]
        msgs.append(StoredMsg(seq, subject, headers, data[pos + subject_len + headers_len : end], ts))
        pos = end
    if pos != len(data):
        raise CorruptData(f"{len(data) - pos} bytes after the last catch-up message")
    return tuple(msgs)


def _decode_part(data: bytes, pos: int) -> Part:
    if len(data) < pos + MSG_HEAD_BYTES + PART_TAIL.size:
        raise CorruptData("catch-up part header cut short")
    seq, ts, subject_len, headers_len, payload_len = MSG_HEAD.unpack_from(data, pos)
    offset, chunk_len = PART_TAIL.unpack_from(data, pos + MSG_HEAD_BYTES)
    pos += MSG_HEAD_BYTES + PART_TAIL.size
    if seq == 0 or pos + subject_len + chunk_len != len(data):
        raise CorruptData("catch-up part of the wrong length")
    if chunk_len == 0 or offset + chunk_len > headers_len + payload_len:
        raise CorruptData("catch-up part outside its message")
    subject = _subject(data[pos : pos + subject_len])
    return Part(seq, ts, subject, headers_len, payload_len, offset, data[pos + subject_len :])


def _subject(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptData("catch-up subject is not UTF-8") from None
