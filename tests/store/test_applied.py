"""The applied-index journal (store/applied.py) and FileStreamStore.rewind / hold_seal: what a
replicated stream uses to cut its store back, after a crash, to the RAFT index it recorded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.store.api import StoreLimits
from appliance.store.applied import RECORD_BYTES, AppliedJournal, AppliedRecord, decode_all, encode, held_segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SealedSegment
from appliance.testing.faultfs import FaultFS

DIRECTORY = "/stream"


def open_store(fs: FaultFS, *, segment_bytes: int = 8 * 1024 * 1024) -> FileStreamStore:
    config = FileStoreConfig(DIRECTORY, limits=StoreLimits(), segment_bytes=segment_bytes,
                             block_raw_bytes=min(segment_bytes, 1024 * 1024))
    return FileStreamStore(config, ops=fs)


def put(store: FileStreamStore, numbers: range) -> None:
    for n in numbers:
        store.append_batch([("s.%d" % (n % 3), b"", b"payload %d" % n + b"." * 40, n)])


def messages(store: FileStreamStore) -> list[tuple[int, bytes]]:
    return [(m.seq, m.payload) for m in store.scan(1)]


# --- the journal ---------------------------------------------------------------------------------

records = st.builds(AppliedRecord, *(st.integers(0, 2**64 - 1) for _ in range(4)))


@given(st.lists(records, max_size=20))
def test_records_round_trip(items: list[AppliedRecord]) -> None:
    assert decode_all(b"".join(encode(r) for r in items)) == items


@settings(max_examples=300)
@given(st.lists(records, min_size=1, max_size=8), st.data())
def test_a_torn_or_damaged_tail_keeps_the_whole_records_before_it(items: list[AppliedRecord], data: st.DataObject) -> None:
    raw = bytearray(b"".join(encode(r) for r in items))
    cut = data.draw(st.integers(0, len(raw)))
    decoded = decode_all(bytes(raw[:cut]))
    assert decoded == items[: cut // RECORD_BYTES]
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 0xFF
    damaged = decode_all(bytes(raw))
    assert damaged == items[: pos // RECORD_BYTES]


def test_the_journal_reopens_cuts_a_torn_tail_and_stays_bounded() -> None:
    fs = FaultFS()
    fs.make_dirs(DIRECTORY)
    journal = AppliedJournal(fs, DIRECTORY, records_max=4)
    for index in range(1, 4):
        journal.record(AppliedRecord(index, index, 1, 100 + index))
    journal.sync()
    fs.append(journal.path, b"torn")
    reopened = AppliedJournal(fs, DIRECTORY, records_max=4)
    assert [r.index for r in reopened.records] == [1, 2, 3]
    assert fs.size(journal.path) == 3 * RECORD_BYTES  # appends go after whole records again
    reopened.record(AppliedRecord(4, 4, 1, 104))
    assert reopened.full()
    reopened.record(AppliedRecord(5, 5, 2, 40))  # replaces the file, durably
    assert fs.after_crash("lose").read_all(journal.path) == encode(AppliedRecord(5, 5, 2, 40))
    assert held_segment(fs, DIRECTORY) == 2
    reopened.remove()
    assert held_segment(fs, DIRECTORY) is None


# --- rewind ----------------------------------------------------------------------------------------

def test_rewind_drops_every_record_written_since_and_persists() -> None:
    fs = FaultFS()
    store = open_store(fs)
    put(store, range(1, 6))
    position, before = store.position(), messages(store)
    put(store, range(6, 9))
    store.delete(2)
    store.purge("s.1")
    assert store.rewind(*position)
    assert messages(store) == before and store.index.last_seq == 5
    put(store, range(100, 101))
    assert store.index.last_seq == 6  # the next message takes the next sequence after the cut
    store.sync()
    again = open_store(fs.after_crash("lose"))
    assert messages(again) == [*before, (6, b"payload 100" + b"." * 40)]


def test_rewind_refuses_what_it_cannot_restore() -> None:
    fs = FaultFS()
    store = open_store(fs)
    put(store, range(1, 4))
    first, size = store.position()
    assert not store.rewind(first, size + 1)  # longer than the segment is
    assert not store.rewind(first + 1000, size)  # no such segment
    assert store.rewind(first, size)  # where it is: nothing to do
    assert len(messages(store)) == 3


def test_a_held_segment_stays_raw_across_rolls_and_can_be_cut_back_into() -> None:
    fs = FaultFS()
    store = open_store(fs, segment_bytes=400)
    put(store, range(1, 3))
    position = store.position()
    store.hold_seal(position[0])
    before = messages(store)
    put(store, range(3, 30))  # rolls several times (sealing inline, but not what is held)
    segments = store.segments()
    assert len(segments) > 3 and not any(isinstance(s, SealedSegment) for s in segments)
    assert store.rewind(*position)
    assert messages(store) == before and len(store.segments()) == 1
    put(store, range(3, 30))
    store.hold_seal(store.position()[0])  # released: everything older gets sealed
    assert any(isinstance(s, SealedSegment) for s in store.segments())
    assert not store.rewind(*position)  # that segment is compressed now


def test_a_store_opened_with_a_journal_seals_nothing_its_records_may_need() -> None:
    fs = FaultFS()
    store = open_store(fs, segment_bytes=400)
    put(store, range(1, 3))
    journal = AppliedJournal(fs, DIRECTORY)
    first, size = store.position()
    journal.record(AppliedRecord(7, store.index.last_seq, first, size))
    store.hold_seal(first)
    put(store, range(3, 30))
    store.sync()
    journal.sync()
    reopened = open_store(fs.after_crash("flush"))  # recovery would seal closed segments at once
    assert reopened.seal_hold == first
    assert reopened.rewind(first, size) and reopened.index.last_seq == 2
