"""The entries of a stream's RAFT log: encoding and decoding (pure).

A publish batch is binary (the hot path); the rare operations are one kind byte plus JSON.

  MSGS    b"M" + count x ([u16 subject_len][u32 header_len][u32 payload_len][i64 ts_ns]
                       subject header payload)
  DECIDED b"S" + [u64 first_seq] + the messages as in MSGS: publishes a replicated stream's
          leader accepted (decide.py), stored at first_seq, first_seq + 1, ... on every replica
  DELETE  b"D" + {"seq": n, "erase": bool}
  PURGE   b"P" + {"filter": str, "keep": n, "seq": n}
"""

from __future__ import annotations

import json
import struct
from typing import NamedTuple

MSG_HEADER = struct.Struct("<HIIq")
KIND_MSGS = ord("M")
KIND_DELETE = ord("D")
KIND_PURGE = ord("P")
KIND_DECIDED = ord("S")
KIND_MIRROR = ord("R")  # b"R" + {"m": [[seq, subject, header_b64, payload_b64, ts_ns], ...]} (sources.py)


class InMsg(NamedTuple):
    """One published message. Laid out as the store's MsgInput (subject, headers, payload, ts_ns),
    so a run of header-less messages goes to the store as it is."""

    subject: str
    header: bytes
    payload: bytes
    ts_ns: int


FIRST_SEQ = struct.Struct("<Q")


def encode_msgs(msgs: list[InMsg]) -> bytes:
    return _encode([b"M"], msgs)


def encode_decided(first_seq: int, msgs: list[InMsg]) -> bytes:
    return _encode([b"S", FIRST_SEQ.pack(first_seq)], msgs)


def decode_decided(data: bytes) -> tuple[int, list[InMsg]]:
    assert data[0] == KIND_DECIDED
    (first_seq,) = FIRST_SEQ.unpack_from(data, 1)
    return first_seq, _decode(data, 1 + FIRST_SEQ.size)


def _encode(parts: list[bytes], msgs: list[InMsg]) -> bytes:
    pack = MSG_HEADER.pack
    for msg in msgs:
        subject = msg.subject.encode()
        parts.append(pack(len(subject), len(msg.header), len(msg.payload), msg.ts_ns))
        parts.append(subject)
        parts.append(msg.header)
        parts.append(msg.payload)
    return b"".join(parts)


def decode_msgs(data: bytes) -> list[InMsg]:
    assert data[0] == KIND_MSGS
    return _decode(data, 1)


def _decode(data: bytes, offset: int) -> list[InMsg]:
    msgs: list[InMsg] = []
    size = MSG_HEADER.size
    unpack = MSG_HEADER.unpack_from
    end = len(data)
    while offset < end:
        subject_len, header_len, payload_len, ts_ns = unpack(data, offset)
        offset += size
        subject = data[offset : offset + subject_len].decode()
        offset += subject_len
        header = data[offset : offset + header_len]
        offset += header_len
        payload = data[offset : offset + payload_len]
        offset += payload_len
        msgs.append(InMsg(subject, header, payload, ts_ns))
    assert offset == end, "a MSGS or DECIDED entry ends exactly after its last message"
    return msgs


def encode_op(kind: int, body: dict[str, object]) -> bytes:
    return bytes([kind]) + json.dumps(body, separators=(",", ":")).encode()


def decode_op(data: bytes) -> tuple[int, dict[str, object]]:
    body = json.loads(data[1:])
    assert isinstance(body, dict)
    return data[0], body
