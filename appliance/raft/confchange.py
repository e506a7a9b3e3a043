"""Membership changes, one server at a time: encoding and the pure voter-set arithmetic.

A change entry carries the whole membership it produces (voters and learners), so a server that
joins with an empty configuration learns it from the first change it applies (it never knew the
bootstrap voters, which are not in the log).

    [u8 op][u16 len][peer] [u16 count] count x ([u16 len][voter])
    [[u16 count] count x ([u16 len][learner])]    (only when there are learners)

Ops: ADD_LEARNER adds a non-voter; ADD adds a voter, or promotes the peer if it is a learner;
REMOVE takes the peer out, voter or learner.
"""

from __future__ import annotations

import struct

from appliance.errors import CorruptData
from appliance.raft.types import ConfChange, ConfChangeOp, ConfState

U16 = struct.Struct("<H")


def apply_to(conf: ConfState, op: ConfChangeOp, peer: str) -> ConfState:
    """The membership after the change; adding a voter twice or removing a stranger changes
    nothing, and a voter is never demoted to a learner by ADD_LEARNER."""
    voters, learners = set(conf.voters), set(conf.learners)
    if op == ConfChangeOp.ADD:
        voters.add(peer)
        learners.discard(peer)
    elif op == ConfChangeOp.ADD_LEARNER:
        if peer not in voters:
            learners.add(peer)
    else:
        voters.discard(peer)
        learners.discard(peer)
    return ConfState(tuple(sorted(voters)), tuple(sorted(learners)))


def encode_conf_change(change: ConfChange) -> bytes:
    parts = [bytes([int(change.op)]), _text(change.peer), U16.pack(len(change.voters_after))]
    parts.extend(_text(voter) for voter in change.voters_after)
    if change.learners_after:
        parts.append(U16.pack(len(change.learners_after)))
        parts.extend(_text(learner) for learner in change.learners_after)
    return b"".join(parts)


def decode_conf_change(data: bytes) -> ConfChange:
    try:
        op = ConfChangeOp(data[0])
        offset = 1
        peer, offset = _read_text(data, offset)
        (count,) = U16.unpack_from(data, offset)
        offset += U16.size
        voters, offset = _read_ids(data, offset, count)
        learners: list[str] = []
        if offset < len(data):
            (count,) = U16.unpack_from(data, offset)
            learners, offset = _read_ids(data, offset + U16.size, count)
            if not learners:
                raise ValueError("an empty learner list is not written")
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as error:
        raise CorruptData(f"bad conf change entry {data[:16]!r}: {error}") from error
    if (offset != len(data) or voters != sorted(set(voters)) or learners != sorted(set(learners))
            or set(voters) & set(learners)):
        raise CorruptData(f"bad conf change entry {data[:16]!r}")
    return ConfChange(op, peer, tuple(voters), tuple(learners))


def _read_ids(data: bytes, offset: int, count: int) -> tuple[list[str], int]:
    ids = []
    for _ in range(count):
        peer, offset = _read_text(data, offset)
        ids.append(peer)
    return ids, offset


def _text(value: str) -> bytes:
    raw = value.encode()
    return U16.pack(len(raw)) + raw


def _read_text(data: bytes, offset: int) -> tuple[str, int]:
    (size,) = U16.unpack_from(data, offset)
    start = offset + U16.size
    if start + size > len(data):
        raise ValueError("truncated")
    return data[start : start + size].decode(), start + size
