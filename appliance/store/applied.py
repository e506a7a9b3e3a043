"""AppliedJournal: which RAFT index a replicated stream's file store holds, beside the store.

A replicated stream applies committed RAFT entries into its FileStreamStore. After a restart the
group driver re-applies only the entries the store lacks (etcd's Config.Applied), so the stream
must know, from disk, which index its store holds. This journal, a file in the store's
directory, answers it: after every apply (and after every store change made outside the log:
expiry, acks, a catch-up batch) the stream appends one record

    [u64 raft index][u64 store last_seq][u64 active segment first_seq][u64 active segment bytes][u32 crc]

naming the index applied and where the store's active segment ended at that moment (written to
the OS, not fsynced: a process crash keeps it, as it keeps the store's own writes). Whenever the
store is fsynced for the log (before the RAFT log is compacted past it, and on close) the
journal is fsynced after it, so a durable record never names store bytes that are not durable.

On open the stream takes the newest record whose position the store can be cut back to
(FileStreamStore.rewind) and cuts it back there: whatever was written after the record (part of
an entry being applied when the process died, store writes the OS kept but the journal record
did not reach) is gone, and those entries are applied again from the log, onto exactly the
store they were first applied to. So a crash anywhere between a store write and its record
neither duplicates nor loses a message.

Sealing: a rewind can only cut into segments still raw (not compressed since), so the store keeps
every segment from the newest durable record's on unsealed (FileStreamStore.hold_seal, read from
this file when the store opens, before it seals anything); the stream moves the hold on each time
it makes a record naming a newer segment durable.

The file is bounded: past APPLIED_JOURNAL_RECORDS_MAX records it is replaced (atomically) by its
last record. A torn or damaged tail record is ignored (the records before it stand).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from appliance import limits
from appliance.store.fileops import FileOps, write_atomic

JOURNAL_NAME = "raft-applied.idx"
RECORD = struct.Struct("<QQQQ")
CRC = struct.Struct("<I")
RECORD_BYTES = RECORD.size + CRC.size


@dataclass(frozen=True, slots=True)
class AppliedRecord:
    index: int  # the RAFT index applied
    last_seq: int  # the store's last sequence then
    segment_first: int  # the store's active segment (its first sequence names its file)
    segment_bytes: int  # and its size then


def encode(record: AppliedRecord) -> bytes:
    body = RECORD.pack(record.index, record.last_seq, record.segment_first, record.segment_bytes)
    return body + CRC.pack(zlib.crc32(body))


def decode_all(data: bytes) -> list[AppliedRecord]:
    """Every whole, valid record from the start; stops at the first torn or damaged one."""
    out: list[AppliedRecord] = []
    for offset in range(0, len(data) - RECORD_BYTES + 1, RECORD_BYTES):
        body = data[offset : offset + RECORD.size]
        (crc,) = CRC.unpack_from(data, offset + RECORD.size)
        if zlib.crc32(body) != crc:
            break
        out.append(AppliedRecord(*RECORD.unpack(body)))
    return out


def held_segment(ops: FileOps, directory: str) -> int | None:
    """The segment a store with a journal must keep unsealed from when it opens, or None: its
    oldest record's (any record may be the one the store is cut back to: the newest durable one
    is never older than the newest record whose segment the last run kept unsealed)."""
    path = os.path.join(directory, JOURNAL_NAME)
    if not ops.exists(path):
        return None
    records = decode_all(ops.read_all(path))
    return min(record.segment_first for record in records) if records else 0


class AppliedJournal:
    def __init__(self, ops: FileOps, directory: str, *,
                 records_max: int = limits.STORE_APPLIED_JOURNAL_RECORDS_MAX) -> None:
        assert records_max >= 2
        self._ops = ops
        self._dir = directory
        self.path = os.path.join(directory, JOURNAL_NAME)
        self.records_max = records_max
        self.records = decode_all(ops.read_all(self.path)) if ops.exists(self.path) else []
        self._count = len(self.records)
        self._unsynced = False
        if self._count * RECORD_BYTES != (ops.size(self.path) if ops.exists(self.path) else 0):
            self._replace(self.records)  # cut a torn tail off: appends go after whole records

    def last(self) -> AppliedRecord | None:
        return self.records[-1] if self.records else None

    def full(self) -> bool:
        """The next record replaces the file (durably, at once): sync the store first."""
        return self._count >= self.records_max

    def record(self, record: AppliedRecord) -> None:
        """Append `record` (to the OS; durable at the next sync, or at once when `full()`)."""
        if self.full():
            self._replace([record])
            return
        if self._count == 0 and not self._ops.exists(self.path):
            self._ops.create(self.path, encode(record))
            self._ops.fsync_dir(self._dir)
        else:
            self._ops.append(self.path, encode(record))
        self._count += 1
        self._unsynced = True
        self.records = [*self.records[-1:], record]  # only the newest few matter once running

    def remove(self) -> None:
        """The stream is no longer replicated: its store is no longer cut back on open."""
        if self._ops.exists(self.path):
            self._ops.remove(self.path)
            self._ops.fsync_dir(self._dir)
        self.records, self._count, self._unsynced = [], 0, False

    def sync(self) -> None:
        """Make every record durable: call right after the store's own fsync."""
        if self._unsynced:
            self._ops.fsync(self.path)
            self._unsynced = False

    def _replace(self, records: list[AppliedRecord]) -> None:
        write_atomic(self._ops, self.path, b"".join(encode(record) for record in records))
        self._count = len(records)
        self._unsynced = False
        self.records = list(records)
