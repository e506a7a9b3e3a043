"""Membership changes, one server at a time: encoding and the pure voter-set arithmetic.

A change entry carries the whole voter set it produces, so a server that joins with an empty
configuration learns the full membership from the first change it applies (it never knew the
bootstrap voters, which are not in the log).

    [u8 op][u16 len][peer] [u16 count] count x ([u16 len][voter])
"""

from __future__ import annotations

import struct

from appliance.errors import CorruptData
from appliance.raft.types import ConfChange, ConfChangeOp, ConfState

U16 = struct.Struct("<H")


def apply_to(conf: ConfState, op: ConfChangeOp, peer: str) -> ConfState:
    """The voter set after the change; adding a voter twice or removing a stranger changes nothing."""
    voters = set(conf.voters)
    if op == ConfChangeOp.ADD:
        voters.add(peer)
    else:
        voters.discard(peer)
    return ConfState(tuple(sorted(voters)))


def encode_conf_change(change: ConfChange) -> bytes:
    parts = [bytes([int(change.op)]), _text(change.peer), U16.pack(len(change.voters_after))]
    parts.extend(_text(voter) for voter in change.voters_after)
    return b"".join(parts)


def decode_conf_change(data: bytes) -> ConfChange:
    try:
        op = ConfChangeOp(data[0])
        offset = 1
        peer, offset = _read_text(data, offset)
        (count,) = U16.unpack_from(data, offset)
        offset += U16.size
        voters = []
        for _ in range(count):
            voter, offset = _read_text(data, offset)
            voters.append(voter)
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as error:
        raise CorruptData(f"bad conf change entry {data[:16]!r}: {error}") from error
    if offset != len(data) or voters != sorted(set(voters)):
        raise CorruptData(f"bad conf change entry {data[:16]!r}")
    return ConfChange(op, peer, tuple(voters))


def _text(value: str) -> bytes:
    raw = value.encode()
    return U16.pack(len(raw)) + raw


def _read_text(data: bytes, offset: int) -> tuple[str, int]:
    (size,) = U16.unpack_from(data, offset)
    start = offset + U16.size
    if start + size > len(data):
        raise ValueError("truncated")
    return data[start : start + size].decode(), start + size
