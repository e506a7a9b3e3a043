"""Wire encoding of RAFT messages (little endian, versioned). Pure; decode errors are CorruptData.

    [u8 version=1][u8 type][u8 flags][u64 term][u64 log_term][u64 index][u64 commit][u64 reject_hint]
    [str sender][str to][bytes context][u32 n] n x ([u64 term][u64 index][u8 type][bytes data])
    flags bit 0: reject; bit 1: a snapshot follows:
    [u64 index][u64 term][u16 n] n x [str voter] [bytes data]
    and with flags bit 2 (the snapshot's group has learners): [u16 n] n x [str learner]
str = [u16 len][utf-8]; bytes = [u32 len][raw].
"""

from __future__ import annotations

import struct

from appliance.errors import CorruptData
from appliance.raft.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)

VERSION = 1
HEADER = struct.Struct("<BBBQQQQQ")
ENTRY = struct.Struct("<QQB")
SNAPSHOT = struct.Struct("<QQH")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
FLAG_REJECT = 1
FLAG_SNAPSHOT = 2
FLAG_LEARNERS = 4
_MESSAGE_TYPES = {int(kind): kind for kind in MessageType}  # a dict lookup, not an enum call per message
_ENTRY_TYPES = {int(kind): kind for kind in EntryType}
TEXTS_CACHED_MAX = 1024  # encoded peer ids kept (a server knows a few dozen; beyond, encoded each time)
_texts: dict[str, bytes] = {}


def _text(value: str) -> bytes:
    """[u16 len][utf-8] of a peer id: every message carries two, always the same few."""
    out = _texts.get(value)
    if out is None:
        raw = value.encode()
        out = U16.pack(len(raw)) + raw
        if len(_texts) < TEXTS_CACHED_MAX:
            _texts[value] = out
    return out


def _blob(value: bytes) -> bytes:
    return U32.pack(len(value)) + value


def encode_message(m: Message) -> bytes:
    flags = (FLAG_REJECT if m.reject else 0) | (FLAG_SNAPSHOT if m.snapshot is not None else 0)
    if m.snapshot is not None and m.snapshot.meta.conf.learners:
        flags |= FLAG_LEARNERS
    parts = [HEADER.pack(VERSION, m.type, flags, m.term, m.log_term, m.index, m.commit, m.reject_hint),
             _text(m.sender), _text(m.to), _blob(m.context), U32.pack(len(m.entries))]
    for entry in m.entries:
        parts.append(ENTRY.pack(entry.term, entry.index, entry.type))
        parts.append(_blob(entry.data))
    if m.snapshot is not None:
        meta = m.snapshot.meta
        parts.append(SNAPSHOT.pack(meta.index, meta.term, len(meta.conf.voters)))
        parts.extend(_text(voter) for voter in meta.conf.voters)
        parts.append(_blob(m.snapshot.data))
        if meta.conf.learners:
            parts.append(U16.pack(len(meta.conf.learners)))
            parts.extend(_text(learner) for learner in meta.conf.learners)
    return b"".join(parts)


def decode_message(data: bytes) -> Message:
    try:
        return _decode(data)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as error:
        raise CorruptData(f"bad raft message: {error}") from error


def _decode(data: bytes) -> Message:
    """One pass with a local offset: this runs for every message the simulator delivers."""
    version, kind, flags, term, log_term, index, commit, reject_hint = HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptData(f"raft message version {version} (expected {VERSION})")
    message_type = _MESSAGE_TYPES.get(kind)
    if message_type is None:
        raise CorruptData(f"raft message type {kind} unknown")
    offset = HEADER.size
    sender, offset = _read_text(data, offset)
    to, offset = _read_text(data, offset)
    context, offset = _read_blob(data, offset)
    (count,) = U32.unpack_from(data, offset)
    offset += 4
    entries = []
    for _ in range(count):
        entry_term, entry_index, entry_type = ENTRY.unpack_from(data, offset)
        payload, offset = _read_blob(data, offset + ENTRY.size)
        entry_kind = _ENTRY_TYPES.get(entry_type)
        if entry_kind is None:
            raise CorruptData(f"raft entry type {entry_type} unknown")
        entries.append(Entry(entry_term, entry_index, entry_kind, payload))
    snapshot = None
    if flags & FLAG_SNAPSHOT:
        snap_index, snap_term, voter_count = SNAPSHOT.unpack_from(data, offset)
        offset += SNAPSHOT.size
        voters = []
        for _ in range(voter_count):
            voter, offset = _read_text(data, offset)
            voters.append(voter)
        if voters != sorted(set(voters)):
            raise CorruptData("snapshot voters are not sorted and unique")
        blob, offset = _read_blob(data, offset)
        learners = []
        if flags & FLAG_LEARNERS:
            (learner_count,) = U16.unpack_from(data, offset)
            offset += U16.size
            for _ in range(learner_count):
                learner, offset = _read_text(data, offset)
                learners.append(learner)
        if learners != sorted(set(learners)) or set(voters) & set(learners):
            raise CorruptData("snapshot learners are not sorted, unique and apart from the voters")
        snapshot = Snapshot(SnapshotMeta(snap_index, snap_term, ConfState(tuple(voters), tuple(learners))), blob)
    if offset != len(data):
        raise CorruptData(f"{len(data) - offset} trailing bytes after a raft message")
    return Message(message_type, sender, to, term, log_term, index, tuple(entries), commit,
                   bool(flags & FLAG_REJECT), reject_hint, snapshot, context)


def _read_text(data: bytes, offset: int) -> tuple[str, int]:
    (size,) = U16.unpack_from(data, offset)
    end = offset + 2 + size
    if end > len(data):
        raise CorruptData("raft message truncated")
    return data[offset + 2 : end].decode(), end


def _read_blob(data: bytes, offset: int) -> tuple[bytes, int]:
    (size,) = U32.unpack_from(data, offset)
    end = offset + 4 + size
    if end > len(data):
        raise CorruptData("raft message truncated")
    return data[offset + 4 : end], end
