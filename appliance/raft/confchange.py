"""Membership changes, one server at a time: encoding and the pure voter-set arithmetic."""

from __future__ import annotations

from appliance.errors import CorruptData
from appliance.raft.types import ConfChange, ConfChangeOp, ConfState


def encode_conf_change(change: ConfChange) -> bytes:
    return bytes([int(change.op)]) + change.peer.encode()


def decode_conf_change(data: bytes) -> ConfChange:
    if len(data) < 2 or data[0] not in (ConfChangeOp.ADD, ConfChangeOp.REMOVE):
        raise CorruptData(f"bad conf change entry {data[:16]!r}")
    return ConfChange(ConfChangeOp(data[0]), data[1:].decode())


def apply_to(conf: ConfState, change: ConfChange) -> ConfState:
    """The voter set after `change`; adding a voter twice or removing a stranger changes nothing."""
    voters = set(conf.voters)
    if change.op == ConfChangeOp.ADD:
        voters.add(change.peer)
    else:
        voters.discard(change.peer)
    return ConfState(tuple(sorted(voters)))
