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
    return SnapshotRecord(meta.index, meta.term, meta.conf.voters, snapshot.data, meta.conf.learners)


def _entry_records(entries: Sequence[Entry]) -> list[EntryRecord]:
    return [EntryRecord(e.term, e.index, int(e.type), e.data) for e in entries]


class DurableStorage:
    def __init__(self, files: LogFiles, name: str, *, bootstrap: ConfState | None = None) -> None:
        """Open (recovering a torn tail) or create the log `name`; `bootstrap` is the initial voter set."""
        self.file = RaftLogFile(files, name)
        self.memory = MemoryStorage(bootstrap)
        recovered = self.file.recover()
        self.torn_bytes = recovered.torn_bytes
        self.damage: list[str] = []  # what a log damaged mid-file lost (empty: nothing)
        if not recovered.records and not recovered.damaged:
            self.file.rewrite(_snapshot_record(self.memory.snapshot()), [], HardStateRecord(0, "", 0))
            return
        skipped = 0
        for record in recovered.records:
            skipped += self._replay(record)
        if recovered.damaged:
            self._rebuild_after_damage(recovered.damaged, skipped)

    def _rebuild_after_damage(self, damaged: list[tuple[int, int]], skipped: int) -> None:
        """The log was damaged mid-file: keep the contiguous log replayed from it (entries after
        a hole are dropped: RAFT logs have none), clamp the commit to it, and rewrite the file so
        appends go on from a clean log. The state machine then restarts from an older point:
        a consumer redelivers what it had acked since, never skips a message."""
        memory = self.memory
        state = memory.hard_state()
        if state.commit > memory.last_index():
            memory.save(HardState(state.term, state.vote, memory.last_index()), [], sync=False)
        stretches = ", ".join(f"{begin}..{end}" for begin, end in damaged)
        self.damage.append(
            f"{self.file.name}: damaged bytes {stretches} skipped; {skipped} entr(y/ies) after a hole dropped; "
            f"recovered up to index {memory.last_index()} (the damaged file is kept as {self.file.name}.damaged)"
        )
        self.compact(memory.snapshot())

    def _replay(self, record: EntriesBatch | HardStateRecord | SnapshotRecord) -> int:
        """Apply one record; returns how many entries it could not (a hole after damage)."""
        if isinstance(record, SnapshotRecord):
            meta = SnapshotMeta(record.index, record.term, ConfState(record.voters, record.learners))
            self.memory = _fresh_from(Snapshot(meta, record.data), self.memory.hard_state())
        elif isinstance(record, HardStateRecord):
            self.memory.save(HardState(record.term, record.vote, record.commit), [], sync=False)
        else:
            entries = [Entry(r.term, r.index, EntryType(r.type), r.data) for r in record.entries]
            if entries and entries[0].index > self.memory.last_index() + 1:
                return len(entries)  # after a damaged stretch: a hole the log cannot hold
            self.memory.save(None, entries, sync=False)
        return 0

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
        self.file.append_ready(_entry_records(entries) if entries else (),
                               None if hard_state is None else HardStateRecord(hard_state.term, hard_state.vote, hard_state.commit))
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
