"""DurableStorage: the RAFT LogStorage on the durable log file (appliance/store/raftlog.py).

Reads are served from an in-memory copy (a MemoryStorage, bounded by compaction); every write
goes to the file first. The store layer cannot import raft types (layer rule), so this adapter
translates between raft values and the file's plain records.
"""

from __future__ import annotations

from collections.abc import Sequence

from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta
from appliance.store.raftlog import (
    EntriesBatch,
    EntryRecord,
    HardStateRecord,
    LogFiles,
    RaftLogFile,
    SnapshotRecord,
)


def _snapshot_record(snapshot: Snapshot) -> SnapshotRecord:
    meta = snapshot.meta
    return SnapshotRecord(meta.index, meta.term, meta.conf.voters, snapshot.data)


def _entry_records(entries: Sequence[Entry]) -> list[EntryRecord]:
    return [EntryRecord(e.term, e.index, int(e.type), e.data) for e in entries]


class DurableStorage:
    def __init__(self, files: LogFiles, name: str, *, bootstrap: ConfState | None = None) -> None:
        """Open (recovering a torn tail) or create the log `name`; `bootstrap` is the initial voter set."""
        self.file = RaftLogFile(files, name)
        self.memory = MemoryStorage(bootstrap)
        recovered = self.file.recover()
        self.torn_bytes = recovered.torn_bytes
        if not recovered.records:
            self.file.rewrite(_snapshot_record(self.memory.snapshot()), [], HardStateRecord(0, "", 0))
            return
        for record in recovered.records:
            self._replay(record)

    def _replay(self, record: EntriesBatch | HardStateRecord | SnapshotRecord) -> None:
        if isinstance(record, SnapshotRecord):
            meta = SnapshotMeta(record.index, record.term, ConfState(record.voters))
            self.memory = _fresh_from(Snapshot(meta, record.data), self.memory.hard_state())
        elif isinstance(record, HardStateRecord):
            self.memory.save(HardState(record.term, record.vote, record.commit), [], sync=False)
        else:
            entries = [Entry(r.term, r.index, EntryType(r.type), r.data) for r in record.entries]
            self.memory.save(None, entries, sync=False)

    # --- read side -------------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.memory.initial_state()

    def first_index(self) -> int:
        return self.memory.first_index()

    def last_index(self) -> int:
        return self.memory.last_index()

    def term(self, index: int) -> int:
        return self.memory.term(index)

    def entries(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        return self.memory.entries(lo, hi, bytes_max)

    def snapshot(self) -> Snapshot:
        return self.memory.snapshot()

    def hard_state(self) -> HardState:
        return self.memory.hard_state()

    # --- write side ------------------------------------------------------------------------------
    def save(self, hard_state: HardState | None, entries: Sequence[Entry], *, sync: bool) -> None:
        if entries:
            self.file.append_entries(_entry_records(entries))
        if hard_state is not None:
            self.file.append_hard_state(HardStateRecord(hard_state.term, hard_state.vote, hard_state.commit))
        if sync:
            self.file.sync()
        self.memory.save(hard_state, entries, sync=sync)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        self.file.append_snapshot(_snapshot_record(snapshot))
        self.file.sync()
        self.memory.apply_snapshot(snapshot)

    def compact(self, snapshot: Snapshot) -> None:
        self.memory.compact(snapshot)
        memory = self.memory
        entries = memory.entries(memory.first_index(), memory.last_index() + 1, 1 << 62) \
            if memory.last_index() >= memory.first_index() else []
        state = memory.hard_state()
        self.file.rewrite(_snapshot_record(memory.snapshot()), _entry_records(entries),
                          HardStateRecord(state.term, state.vote, state.commit))

    def sync(self) -> None:
        self.file.sync()


def _fresh_from(snapshot: Snapshot, hard_state: HardState) -> MemoryStorage:
    storage = MemoryStorage(snapshot.meta.conf)
    storage.save(hard_state, [], sync=False)
    storage.apply_snapshot(snapshot)
    return storage
