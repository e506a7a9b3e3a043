"""RaftLog: the core's view of the log = stable storage + an unstable tail not yet persisted.

Indexes: first_index() <= applied + 1, applied <= committed <= last_index(). The unstable tail
starts at `unstable_offset`; a pending snapshot (received, not yet persisted) replaces everything.
"""

from __future__ import annotations

from appliance.raft.storage import LogStorage, limit_by_bytes
from appliance.raft.types import Entry, Snapshot


class RaftLog:
    def __init__(self, storage: LogStorage, *, applied: int = 0) -> None:
        """`applied`: what the state machine already holds durably (etcd's Config.Applied), if anything."""
        self.storage = storage
        hard_state, _ = storage.initial_state()
        first = storage.first_index()
        self.unstable_entries: list[Entry] = []
        self.unstable_offset = storage.last_index() + 1
        self.unstable_snapshot: Snapshot | None = None
        self.committed = max(hard_state.commit, first - 1)
        self.applied = max(first - 1, min(applied, self.committed))
        assert self.committed <= storage.last_index(), "commit beyond the stored log"

    # --- positions -----------------------------------------------------------------------------
    def first_index(self) -> int:
        if self.unstable_snapshot is not None:
            return self.unstable_snapshot.meta.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        if self.unstable_entries:
            return self.unstable_offset + len(self.unstable_entries) - 1
        if self.unstable_snapshot is not None:
            return self.unstable_snapshot.meta.index
        return self.storage.last_index()

    def term(self, index: int) -> int | None:
        """Term at `index`, or None when compacted away or beyond the end."""
        if self.unstable_snapshot is not None and index == self.unstable_snapshot.meta.index:
            return self.unstable_snapshot.meta.term
        if self.unstable_entries and self.unstable_offset <= index <= self.last_index():
            return self.unstable_entries[index - self.unstable_offset].term
        if index < self.first_index() - 1 or index > self.last_index():
            return None
        if self.unstable_snapshot is not None:
            return None
        return self.storage.term(index)

    def last_term(self) -> int:
        term = self.term(self.last_index())
        assert term is not None
        return term

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, *, last_index: int, last_term: int) -> bool:
        """Is a candidate's log (last_term, last_index) at least as up to date as ours (§5.4.1)?"""
        return last_term > self.last_term() or (last_term == self.last_term() and last_index >= self.last_index())

    # --- reading entries -----------------------------------------------------------------------
    def slice(self, lo: int, hi: int, bytes_max: int) -> list[Entry]:
        """Entries [lo, hi), bounded by bytes_max (at least one)."""
        assert self.first_index() <= lo <= hi <= self.last_index() + 1
        if lo == hi:
            return []
        result: list[Entry] = []
        if lo < self.unstable_offset:
            result = self.storage.entries(lo, min(hi, self.unstable_offset), bytes_max)
            if len(result) < min(hi, self.unstable_offset) - lo:
                return result
        if hi > self.unstable_offset:
            start = max(lo, self.unstable_offset) - self.unstable_offset
            result = result + self.unstable_entries[start : hi - self.unstable_offset]
        return limit_by_bytes(result, bytes_max)

    def next_committed(self, bytes_max: int) -> list[Entry]:
        """Committed entries not yet applied, bounded by bytes_max."""
        lo = max(self.applied + 1, self.first_index())
        if self.committed < lo:
            return []
        return self.slice(lo, self.committed + 1, bytes_max)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (i, term(i)) with i <= index and term(i) <= term: fast backtracking (etcd)."""
        while index > 0:
            found = self.term(index)
            if found is None:
                return index, 0
            if found <= term:
                return index, found
            index -= 1
        return 0, 0

    # --- changing the log ----------------------------------------------------------------------
    def append(self, entries: list[Entry]) -> int:
        """Add entries (index order, contiguous), replacing any conflicting tail; returns last index."""
        if not entries:
            return self.last_index()
        first = entries[0].index
        assert first - 1 >= self.committed, "never overwrite committed entries"
        assert first <= self.last_index() + 1
        if first == self.unstable_offset + len(self.unstable_entries):
            self.unstable_entries.extend(entries)
        elif first <= self.unstable_offset:
            self.unstable_offset = first
            self.unstable_entries = list(entries)
        else:
            del self.unstable_entries[first - self.unstable_offset :]
            self.unstable_entries.extend(entries)
        return self.last_index()

    def maybe_append(self, *, prev_index: int, prev_term: int, commit: int, entries: tuple[Entry, ...],
                     check_match: bool = True) -> int | None:
        """Follower side of APPEND: None if (prev_index, prev_term) does not match our log."""
        if check_match and not self.match_term(prev_index, prev_term):
            return None
        if not check_match and prev_index > self.last_index():
            return None
        last_new = prev_index + len(entries)
        conflict = self._find_conflict(entries)
        if conflict:
            self.append([entry for entry in entries if entry.index >= conflict])
        self.commit_to(min(commit, last_new))
        return last_new

    def _find_conflict(self, entries: tuple[Entry, ...]) -> int:
        for entry in entries:
            if not self.match_term(entry.index, entry.term):
                return entry.index
        return 0

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            assert index <= self.last_index(), f"commit {index} beyond last index {self.last_index()}"
            self.committed = index

    def applied_to(self, index: int) -> None:
        assert self.applied <= index <= self.committed
        self.applied = index

    def restore(self, snapshot: Snapshot) -> None:
        self.unstable_snapshot = snapshot
        self.unstable_entries = []
        self.unstable_offset = snapshot.meta.index + 1
        self.committed = snapshot.meta.index

    def stable_to(self, *, index: int, term: int) -> None:
        """Entries up to (index, term) are persisted; drop them from the unstable tail."""
        if not self.unstable_entries or index < self.unstable_offset:
            return
        if self.term(index) != term:
            return
        drop = index - self.unstable_offset + 1
        del self.unstable_entries[:drop]
        self.unstable_offset = index + 1

    def stable_snapshot_to(self, index: int) -> None:
        if self.unstable_snapshot is not None and self.unstable_snapshot.meta.index == index:
            self.unstable_snapshot = None
