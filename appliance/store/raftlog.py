"""The durable RAFT log: one append-only file of checksummed records per group.

This is a standalone format of its own (not the stream segment store), written through a tiny
file seam (`LogFiles`) so that the simulator's disk (appliance/testing/sim/disk.py) can crash it,
lose unsynced writes, and tear the last write.

Record frame (little endian):  [u32 body_len][u32 crc32(body)][body]   body = [u8 kind][payload]
  ENTRIES    [u64 first_index][u32 count] count x [u64 term][u8 type][u32 len][data]
             — replaces whatever the log held at first_index and after
  HARD_STATE [u64 term][u64 commit][u16 len][vote]
  SNAPSHOT   [u64 index][u64 term][u16 voters] voters x ([u16 len][id]) [u32 len][data]
             [[u16 learners] learners x ([u16 len][id])]  (only when the group has learners)
             — the log is this snapshot; entries up to index are gone

Recovery: records are replayed in order. A bad or short record that reaches the end of the file,
or is followed only by zero bytes (space OsLogFiles preallocated and never wrote), is a torn tail
(a write cut by a crash): it is truncated away with the zero bytes, durably. A run of zero bytes
after the last whole record is that unwritten space, not a record. A bad record followed by
more data is corruption in the middle: decode_all raises CorruptData; RaftLogFile.recover then
salvages every whole record around it (never silently: it reports the damaged stretches and
keeps the file as found beside the log) and the owner rebuilds the log from what it replayed.
Compaction rewrites the file atomically (LogFiles.replace): snapshot, remaining entries, state.
"""

from __future__ import annotations

import enum
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from appliance import limits
from appliance.errors import CorruptData
from appliance.store.fileops import FileOps, write_atomic
from appliance.store.powerloss import file_ops
from appliance.store.recovery import unwritten_tail

FRAME = struct.Struct("<II")
ENTRIES_HEADER = struct.Struct("<QI")
ENTRY_HEADER = struct.Struct("<QBI")
HARD_STATE = struct.Struct("<QQH")
SNAPSHOT_HEADER = struct.Struct("<QQH")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")


DAMAGED_SUFFIX = ".damaged"  # a log damaged mid-file, kept as found after its rebuild


class RecordKind(enum.IntEnum):
    ENTRIES = 1
    HARD_STATE = 2
    SNAPSHOT = 3


class LogFiles(Protocol):
    """The file operations the log needs; names are plain file names inside one directory."""

    def read(self, name: str) -> bytes: ...

    def append(self, name: str, data: bytes) -> None: ...

    def sync(self, name: str) -> None: ...

    def truncate(self, name: str, size: int) -> None:
        """Cut the file to `size` bytes, durably."""
        ...

    def replace(self, name: str, data: bytes) -> None:
        """Atomically and durably make `data` the whole content of the file."""
        ...


@dataclass(frozen=True, slots=True)
class EntryRecord:
    term: int
    index: int
    type: int
    data: bytes


@dataclass(frozen=True, slots=True)
class HardStateRecord:
    term: int
    vote: str
    commit: int


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    index: int
    term: int
    voters: tuple[str, ...]
    data: bytes
    learners: tuple[str, ...] = ()


@dataclass(slots=True)
class Recovered:
    """What a replay found, in order; plus how many torn bytes were cut off the tail."""

    records: list[EntriesBatch | HardStateRecord | SnapshotRecord] = field(default_factory=list)
    torn_bytes: int = 0
    damaged: list[tuple[int, int]] = field(default_factory=list)  # [begin, end) skipped mid-file


@dataclass(frozen=True, slots=True)
class EntriesBatch:
    entries: tuple[EntryRecord, ...]


# --- encoding (pure) --------------------------------------------------------------------------
def frame(kind: RecordKind, payload: bytes) -> bytes:
    body = bytes([kind]) + payload
    assert len(body) <= limits.RAFT_LOG_RECORD_BYTES_MAX, "record over RAFT_LOG_RECORD_BYTES_MAX"
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def encode_entries(entries: Sequence[EntryRecord]) -> bytes:
    assert entries
    parts = [ENTRIES_HEADER.pack(entries[0].index, len(entries))]
    for position, entry in enumerate(entries):
        assert entry.index == entries[0].index + position, "entries are contiguous"
        parts.append(ENTRY_HEADER.pack(entry.term, entry.type, len(entry.data)))
        parts.append(entry.data)
    return frame(RecordKind.ENTRIES, b"".join(parts))


def encode_hard_state(state: HardStateRecord) -> bytes:
    vote = state.vote.encode()
    return frame(RecordKind.HARD_STATE, HARD_STATE.pack(state.term, state.commit, len(vote)) + vote)


def encode_snapshot(snapshot: SnapshotRecord) -> bytes:
    parts = [SNAPSHOT_HEADER.pack(snapshot.index, snapshot.term, len(snapshot.voters))]
    parts.extend(_ids(snapshot.voters))
    parts.append(U32.pack(len(snapshot.data)) + snapshot.data)
    if snapshot.learners:
        parts.append(U16.pack(len(snapshot.learners)))
        parts.extend(_ids(snapshot.learners))
    return frame(RecordKind.SNAPSHOT, b"".join(parts))


def _ids(ids: Sequence[str]) -> list[bytes]:
    out = []
    for peer in ids:
        raw = peer.encode()
        out.append(U16.pack(len(raw)) + raw)
    return out


def _read_ids(view: memoryview, offset: int, count: int) -> tuple[tuple[str, ...], int]:
    ids = []
    for _ in range(count):
        (size,) = U16.unpack_from(view, offset)
        ids.append(bytes(view[offset + 2 : offset + 2 + size]).decode())
        offset += 2 + size
    return tuple(ids), offset


def _decode_body(body: bytes) -> EntriesBatch | HardStateRecord | SnapshotRecord:
    kind, view = body[0], memoryview(body)[1:]
    if kind == RecordKind.ENTRIES:
        first, count = ENTRIES_HEADER.unpack_from(view, 0)
        offset = ENTRIES_HEADER.size
        entries = []
        for position in range(count):
            term, entry_type, size = ENTRY_HEADER.unpack_from(view, offset)
            offset += ENTRY_HEADER.size
            entries.append(EntryRecord(term, first + position, entry_type, bytes(view[offset : offset + size])))
            offset += size
        return EntriesBatch(tuple(entries))
    if kind == RecordKind.HARD_STATE:
        term, commit, size = HARD_STATE.unpack_from(view, 0)
        vote = bytes(view[HARD_STATE.size : HARD_STATE.size + size]).decode()
        return HardStateRecord(term, vote, commit)
    if kind == RecordKind.SNAPSHOT:
        index, term, voter_count = SNAPSHOT_HEADER.unpack_from(view, 0)
        voters, offset = _read_ids(view, SNAPSHOT_HEADER.size, voter_count)
        (size,) = U32.unpack_from(view, offset)
        data = bytes(view[offset + 4 : offset + 4 + size])
        offset += 4 + size
        learners: tuple[str, ...] = ()
        if offset < len(view):  # written by a group with learners
            (learner_count,) = U16.unpack_from(view, offset)
            learners, offset = _read_ids(view, offset + 2, learner_count)
        return SnapshotRecord(index, term, voters, data, learners)
    raise CorruptData(f"unknown raft log record kind {kind}")


def decode_all(data: bytes, *, name: str = "") -> tuple[list[EntriesBatch | HardStateRecord | SnapshotRecord], int]:
    """Decode every whole record; returns (records, valid_length). Raises CorruptData mid-file."""
    records: list[EntriesBatch | HardStateRecord | SnapshotRecord] = []
    offset = 0
    while offset < len(data):
        if offset + FRAME.size > len(data):
            break  # torn frame header
        length, checksum = FRAME.unpack_from(data, offset)
        end = offset + FRAME.size + length
        if end > len(data):
            break  # torn body
        body = data[offset + FRAME.size : end]
        if length == 0 or zlib.crc32(body) != checksum:
            if end == len(data) or unwritten_tail(data, end):
                break  # the last record is torn, or preallocated space never written (OsLogFiles)
            raise CorruptData("checksum mismatch before the end of the log", path=name, offset=offset)
        try:
            records.append(_decode_body(body))
        except (struct.error, UnicodeDecodeError) as error:
            raise CorruptData(f"undecodable record: {error}", path=name, offset=offset) from error
        offset = end
    return records, offset


def salvage(data: bytes) -> tuple[list[EntriesBatch | HardStateRecord | SnapshotRecord], int, list[tuple[int, int]]]:
    """decode_all for a log damaged in the middle: every whole record, skipping each damaged
    stretch to the next offset where a valid record starts and the chain goes on (a checksummed
    frame followed by another one or by the end). Returns (records, valid_length, damaged)."""
    found: list[EntriesBatch | HardStateRecord | SnapshotRecord] = []
    damaged: list[tuple[int, int]] = []
    offset = 0
    while True:
        try:
            part, valid = decode_all(data[offset:])
            return found + part, offset + valid, damaged
        except CorruptData as exc:
            stop = offset + max(exc.offset, 0)
            part, _ = decode_all(data[offset:stop])
            found += part
            resume = _resync(data, stop)
            if resume is None:  # nothing valid follows: the rest is one damaged stretch
                damaged.append((stop, len(data)))
                return found, len(data), damaged
            damaged.append((stop, resume))
            offset = resume


def _frame_at(data: bytes, offset: int) -> int | None:
    """The end of a valid, decodable record at offset, or None."""
    if offset + FRAME.size > len(data):
        return None
    length, checksum = FRAME.unpack_from(data, offset)
    end: int = offset + FRAME.size + length
    if length == 0 or end > len(data) or zlib.crc32(data[offset + FRAME.size : end]) != checksum:
        return None
    try:
        _decode_body(data[offset + FRAME.size : end])
    except (CorruptData, struct.error, UnicodeDecodeError):
        return None
    return end


def _resync(data: bytes, start: int) -> int | None:
    for offset in range(start + 1, len(data) - FRAME.size):
        end = _frame_at(data, offset)
        if end is not None and (end == len(data) or _frame_at(data, end) is not None):
            return offset
    return None


# --- the log file -----------------------------------------------------------------------------
class RaftLogFile:
    def __init__(self, files: LogFiles, name: str) -> None:
        self.files = files
        self.name = name

    def recover(self) -> Recovered:
        """The records of the log; a torn tail is cut off. Damage in the middle is skipped to the
        next valid record (salvage); the caller rebuilds the log file from what it replays and
        the damaged original is kept beside it as `<name>.damaged`."""
        data = self.files.read(self.name)
        try:
            records, valid = decode_all(data, name=self.name)
        except CorruptData:
            records, valid, damaged = salvage(data)
            self.files.replace(self.name + DAMAGED_SUFFIX, data)
            return Recovered(records, 0, damaged)
        if valid < len(data):
            self.files.truncate(self.name, valid)
        return Recovered(records, len(data) - valid)

    def append_entries(self, entries: Sequence[EntryRecord]) -> None:
        self.files.append(self.name, encode_entries(entries))

    def append_hard_state(self, state: HardStateRecord) -> None:
        self.files.append(self.name, encode_hard_state(state))

    def append_snapshot(self, snapshot: SnapshotRecord) -> None:
        self.files.append(self.name, encode_snapshot(snapshot))

    def append_ready(self, entries: Sequence[EntryRecord], state: HardStateRecord | None) -> None:
        """A Ready's entries, then its hard state, as the two records append_entries and
        append_hard_state would write, in one write (one system call on every replica's path)."""
        if entries and state is not None:
            self.files.append(self.name, encode_entries(entries) + encode_hard_state(state))
        elif entries:
            self.append_entries(entries)
        elif state is not None:
            self.append_hard_state(state)

    def sync(self) -> None:
        self.files.sync(self.name)

    def rewrite(self, snapshot: SnapshotRecord, entries: Sequence[EntryRecord], state: HardStateRecord) -> None:
        data = encode_snapshot(snapshot) + (encode_entries(entries) if entries else b"") + encode_hard_state(state)
        self.files.replace(self.name, data)


class OsLogFiles:
    """LogFiles on a real directory, through the process's FileOps (powerloss.file_ops: the one
    place a fault-injecting layer goes in): appends through one open handle per file into space
    preallocated ahead of them (posix_fallocate, STORE_PREALLOCATE_* as a stream's active
    segment), and `sync` is an fdatasync, so a synced append commits neither a new file size nor
    new blocks (the RAFT log's fsync is on every replicated publish's path). The file ends in
    zero bytes that are not data while it is open; `close` trims them, and after a crash
    recovery reads a run of zero bytes after the last whole record as unwritten space
    (decode_all). A file's first append also syncs the directory, so the name of a log whose
    records are synced survives a power cut as well as its bytes (the FileOps rule: a new name
    is durable after fsync_dir)."""

    def __init__(self, directory: str, ops: FileOps | None = None, *,
                 preallocate_bytes: int = limits.STORE_PREALLOCATE_BYTES) -> None:
        self.directory = directory
        self._ops = ops if ops is not None else file_ops(preallocate_bytes=preallocate_bytes)
        self._ops.make_dirs(directory)
        self._known: dict[str, str] = {}  # name -> path, of names whose directory entry is durable

    def _path(self, name: str) -> str:
        path = self._known.get(name)
        if path is not None:
            return path
        assert "/" not in name and name not in ("", ".", "..")
        return os.path.join(self.directory, name)

    def read(self, name: str) -> bytes:
        try:
            return self._ops.read_all(self._path(name))
        except FileNotFoundError:
            return b""

    def append(self, name: str, data: bytes) -> None:
        path = self._known.get(name)
        if path is not None:
            self._ops.append(path, data)
            return
        path = self._path(name)
        new = not self._ops.exists(path)
        self._ops.append(path, data)
        if new:
            self._ops.fsync_dir(self.directory)
        self._known[name] = path

    def sync(self, name: str) -> None:
        self._ops.fsync(self._path(name))

    def truncate(self, name: str, size: int) -> None:
        path = self._path(name)
        self._ops.truncate(path, size)
        self._ops.fsync(path)  # fdatasync commits a changed size: it is needed to read the data

    def replace(self, name: str, data: bytes) -> None:
        path = self._path(name)
        write_atomic(self._ops, path, data)
        self._known[name] = path

    def close(self, name: str | None = None) -> None:
        """Close the file `name` (every file without one), trimming its preallocated tail."""
        if name is None:
            self._ops.close()
        else:
            self._ops.close_file(self._path(name))
