"""AppliedPosition: the RAFT index a replicated stream's file store holds, kept across restarts.

The stream's group re-applies, after a restart, only the committed entries its store lacks
(StateMachine.applied_index, cluster/group.py). A replicated stream with a file store keeps an
AppliedJournal (store/applied.py) beside the store:

- `open()` (before anything reads the store): cut the store back to the newest journal record it
  can be cut back to (FileStreamStore.rewind), so it holds exactly what it held when that index
  was applied (whatever a crash left half-written after it is dropped) and return that index. An
  entry applied again lands on the same state it first landed on: the same sequences, no
  duplicate, nothing lost. A store that cannot be cut back (the record's segment sealed since) is
  refused (BrokenError): serving it could duplicate or diverge.
- `note(index)` after every apply, and after store changes outside the log (expiry, acks, a
  catch-up batch), with the index applied so far: one record, written to the OS (a process crash
  keeps it).
- `sync()` right after each store fsync (before the RAFT log is compacted past the store, on
  close, and when a record names a new active segment): a durable record never names store
  bytes that are not durable. The store keeps every segment from the newest durable record's
  on unsealed (FileStreamStore.hold_seal): whichever record survives a crash, the store can be
  cut back to it.

A memory store keeps nothing across a restart: its stream has no journal (applied index 0). A
file store opened for a stream that is not replicated (any more) drops its journal (`forget`).
"""

from __future__ import annotations

import logging

from appliance.errors import BrokenError
from appliance.store.applied import AppliedJournal, AppliedRecord
from appliance.store.filestore import FileStreamStore

logger = logging.getLogger(__name__)


class AppliedPosition:
    def __init__(self, store: FileStreamStore) -> None:
        self.store = store
        self.journal = AppliedJournal(store.ops, store.config.directory)
        self.index = 0

    def open(self, name: str) -> int:
        """Rewind the store to its newest recorded position; returns the index applied there."""
        store, journal = self.store, self.journal
        records = journal.records
        if not records:  # a new stream (or one that had no log before): its store is where it starts
            self.note(0)
            journal.sync()
            return 0
        for record in reversed(records):
            if not store.rewind(record.segment_first, record.segment_bytes):
                continue
            if store.index.last_seq != record.last_seq:
                continue  # cut back further: an older record may still match
            if record is not records[-1]:
                logger.warning("stream %s: store cut back to RAFT index %d (a newer record did not match)",
                               name, record.index)
            self.index = record.index
            journal.record(record)  # the newest record is where the store is now
            return record.index
        raise BrokenError(
            f"stream {name}: the store cannot be cut back to a RAFT index it recorded "
            f"(newest: {records[-1]}); it was written past that point and compacted since"
        )

    def note(self, index: int) -> None:
        """The store holds everything applied up to `index`, as it is now."""
        self.index = index
        store = self.store
        first, size = store.position()
        if self.journal.full():
            store.sync()  # the record replacing the file is durable at once: so must its bytes be
        self.journal.record(AppliedRecord(index, store.index.last_seq, first, size))
        if first != store.seal_hold:
            # a new active segment (or the first record): make this record durable now, so the
            # segments before it may be sealed (one store fsync and one journal fsync per roll)
            store.sync()
            self.sync()

    def settle(self, index: int) -> None:
        """Record `index` and make it durable at once: after an erase rewrote a segment in place,
        the positions recorded before it no longer name the same bytes. Not covered: a crash
        between the rewrite and this record leaves only records with pre-erase offsets; the cut
        back then usually fails its last_seq check and the store is refused (BrokenError)."""
        self.note(index)
        self.store.sync()
        self.sync()

    def sync(self) -> None:
        """Right after a store fsync: the records written so far are durable, and segments older
        than the newest one's may be sealed (no open will cut back into them)."""
        self.journal.sync()
        last = self.journal.last()
        if last is not None and last.segment_first != self.store.seal_hold:
            self.store.hold_seal(last.segment_first)


def forget(store: FileStreamStore) -> None:
    """An unreplicated stream's store: no journal, nothing held unsealed."""
    if store.seal_hold is not None:
        AppliedJournal(store.ops, store.config.directory).remove()
        store.hold_seal(None)
