"""Damage in the middle of an active segment: recovery resyncs to the next valid record.

Properties over random messages and random damage (hypothesis): a damaged record is never served
(no wrong bytes, ever), every record the damage did not touch is served, before and after it,
the lost sequences are reported (`lost()`), and loading one says it is lost.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import CorruptData
from appliance.store import records, segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import ActiveSegment
from appliance.store.recovery import incomplete_write
from appliance.testing.faultfs import FaultFS

DIRECTORY = "/d"

messages = st.lists(
    st.tuples(st.sampled_from(["a", "b.c", "orders.eu.1"]), st.binary(max_size=300)), min_size=3, max_size=40
)


def filled(msgs: list[tuple[str, bytes]]) -> tuple[FaultFS, str, dict[int, tuple[str, bytes]], list[tuple[int, int, int]]]:
    """A closed store of msgs in one active segment; (fs, path, seq -> msg, (seq, offset, end))."""
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=1 << 20), ops=fs)
    truth = {}
    for subject, payload in msgs:
        seq = store.store_msg(subject, b"", payload, 1000 + len(truth))
        truth[seq] = (subject, payload)
    active = store.segments()[-1]
    assert isinstance(active, ActiveSegment)
    path = active.path
    store.close()
    frames, _ = records.scan_frames(fs.read_all(path), segment.HEADER_BYTES)
    return fs, path, truth, [(f[3], f[0], f[1]) for f in frames]


def reopened(fs: FaultFS) -> FileStreamStore:
    return FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=1 << 20), ops=fs)


def check(store: FileStreamStore, truth: dict[int, tuple[str, bytes]], hit: set[int]) -> None:
    served = {m.seq: (m.subject, m.payload) for m in store.scan()}
    for seq, msg in served.items():
        assert truth[seq] == msg, f"seq {seq} served wrong bytes"
    assert set(truth) - hit <= set(served), "every record the damage did not touch is served"
    lost = store.lost()
    missing = sorted(set(truth) - set(served))
    assert set(lost.msgs) <= hit, "only damaged records are called lost"
    for seq in lost.msgs:
        with pytest.raises(CorruptData, match="is lost"):
            store.load(seq)
    assert set(missing) <= set(lost.msgs) | {max(truth)}, "a missing record is reported lost (or was a torn tail)"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.integers(0, 2**31), st.integers(1, 255))
def test_one_damaged_byte_loses_exactly_its_record(msgs: list[tuple[str, bytes]], where: int, xor: int) -> None:
    fs, path, truth, frames = filled(msgs)
    size = frames[-1][2]
    offset = segment.HEADER_BYTES + where % (size - segment.HEADER_BYTES)
    hit = {seq for seq, begin, end in frames if begin <= offset < end}
    damaged = fs.after_crash("flush")
    for bit in range(8):
        if xor >> bit & 1:
            damaged.flip_bit(path, offset * 8 + bit)
    store = reopened(damaged)
    check(store, truth, hit)
    if hit != {max(truth)}:  # damage before the last record is never truncated as a torn tail
        assert store.recovery.torn_bytes == 0
        assert set(store.lost().msgs) == hit


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.lists(st.integers(0, 2**31), min_size=1, max_size=4), st.integers(1, 600))
def test_damaged_stretches_never_serve_wrong_bytes(msgs: list[tuple[str, bytes]], wheres: list[int], run: int) -> None:
    """Several flipped bytes, or a zeroed run (a lost page): never wrong bytes, never a crash."""
    fs, path, truth, frames = filled(msgs)
    size = frames[-1][2]
    damaged = fs.after_crash("flush")
    hit: set[int] = set()
    assert sorted(truth) == [f[0] for f in frames]
    data = bytearray(damaged.read_all(path))
    for where in wheres:
        offset = segment.HEADER_BYTES + where % (size - segment.HEADER_BYTES)
        end = min(offset + (run if len(wheres) == 1 else 1), size)
        for at in range(offset, end):
            if data[at] and len(wheres) == 1:
                damaged.flip_bit(path, at * 8 + (data[at].bit_length() - 1))  # clears a set bit: zero-ish run
            elif len(wheres) > 1:
                damaged.flip_bit(path, at * 8)
        hit |= {seq for seq, begin, stop in frames if begin < end and offset < stop}
    store = reopened(damaged)
    served = {m.seq: (m.subject, m.payload) for m in store.scan()}
    for seq, msg in served.items():
        assert truth[seq] == msg, f"seq {seq} served wrong bytes"
    assert set(store.lost().msgs) <= hit


def test_a_record_after_the_damage_that_holds_a_record_in_its_payload_is_not_mistaken() -> None:
    """A payload made of valid record bytes: resync after damage before it must not resume inside
    the payload (the candidate must be a forward message followed by a valid record)."""
    inner = records.encode_msg(2, b"forged", b"", b"not the real message 2", 5)
    fs, path, truth, frames = filled([("a", b"first"), ("b", inner), ("c", b"third"), ("d", b"fourth")])
    damaged = fs.after_crash("flush")
    damaged.flip_bit(path, (frames[1][1] + 2) * 8)  # the length field of record 2
    store = reopened(damaged)
    served = {m.seq: (m.subject, m.payload) for m in store.scan()}
    assert served == {1: truth[1], 3: truth[3], 4: truth[4]}
    assert store.lost().msgs == (2,)


def test_only_an_incomplete_last_write_is_a_torn_tail() -> None:
    record = records.encode_msg(7, b"s", b"", b"payload", 1)
    whole = segment.encode_active_header(7) + record
    assert incomplete_write(whole[:-3], segment.HEADER_BYTES), "cut short"
    assert incomplete_write(whole[:-3] + bytes(3 + 4096), segment.HEADER_BYTES), "zeros where the write stopped"
    flipped = bytearray(whole)
    flipped[segment.HEADER_BYTES + 20] ^= 1
    assert not incomplete_write(bytes(flipped), segment.HEADER_BYTES), "a whole record with a bad checksum"


def test_a_whole_damaged_last_record_is_kept_and_its_sequence_never_reused() -> None:
    fs, path, _truth, frames = filled([("a", b"one"), ("b", b"two"), ("c", b"three")])
    damaged = fs.after_crash("flush")
    damaged.flip_bit(path, (frames[-1][1] + 30) * 8)  # inside the body of the last record
    store = reopened(damaged)
    assert store.recovery.torn_bytes == 0 and store.lost().msgs == (3,)
    assert store.store_msg("d", b"", b"four", 9) == 4, "the lost sequence is not handed out again"
    store.close()
    again = reopened(damaged)
    assert {m.seq: m.payload for m in again.scan()} == {1: b"one", 2: b"two", 4: b"four"}
    assert again.lost().msgs == (3,)


def test_damage_met_while_reading_is_quarantined_not_raised_out_of_scans() -> None:
    """A sealed block damaged after the store opened: the read that meets it fails with a clear
    error, its messages become lost (never served), scans and next/last reads skip them."""
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=1500, block_raw_bytes=300, block_cache_bytes=0), ops=fs)
    for i in range(60):
        store.store_msg("ev", b"", b"event-%03d" % i, 1000 + i)
    sealed = store.segments()[0]
    assert not isinstance(sealed, ActiveSegment)
    block = sealed.blocks[1]
    fs.flip_bit(sealed.path, (block.data_offset + 3) * 8)  # under the open store
    with pytest.raises(CorruptData, match="block checksum"):
        store.load(block.first_seq)
    lost = store.lost()
    assert lost.msgs == tuple(range(block.first_seq, block.last_seq + 1))
    with pytest.raises(CorruptData, match="is lost"):
        store.load(block.first_seq)
    served = [m.seq for m in store.scan()]
    assert served == [s for s in range(1, 61) if not block.first_seq <= s <= block.last_seq]
    after = store.load_next(">", block.first_seq)
    assert after is not None and after.seq == block.last_seq + 1
    other = sealed.blocks[2]
    fs.flip_bit(sealed.path, (other.data_offset + 3) * 8)  # met first by a scan this time
    gone = set(range(block.first_seq, block.last_seq + 1)) | set(range(other.first_seq, other.last_seq + 1))
    assert [m.seq for m in store.scan()] == [s for s in range(1, 61) if s not in gone]
    assert set(store.lost().msgs) == gone
    store.close()


@pytest.mark.parametrize("sealed", [False, True])
def test_a_damaged_segment_header_is_rebuilt_from_the_name_and_contents(sealed: bool) -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=1500, block_raw_bytes=300), ops=fs)
    for i in range(60):
        store.store_msg("ev", b"", b"event-%03d" % i, 1000 + i)
    seg = store.segments()[0 if sealed else -1]
    assert isinstance(seg, ActiveSegment) != sealed
    store.close()
    damaged = fs.after_crash("flush")
    damaged.flip_bit(seg.path, 12 * 8 + 1)  # the first_seq field of the header
    again = reopened(damaged)
    assert again.recovery.corrupt == [] and len(again.recovery.repaired) == 1
    assert [m.payload for m in again.scan()] == [b"event-%03d" % i for i in range(60)]
    assert segment.decode_header(damaged.read_all(seg.path)).first_seq == seg.first_seq


def test_an_erase_in_a_damaged_segment_deletes_without_rewriting_around_the_damage() -> None:
    fs, path, _truth, frames = filled([("a", b"one"), ("b", b"two"), ("c", b"three"), ("d", b"four")])
    damaged = fs.after_crash("flush")
    damaged.flip_bit(path, (frames[1][1] + 20) * 8)
    store = reopened(damaged)
    before = damaged.read_all(path)
    assert store.delete(3, erase=True)
    assert damaged.read_all(path).startswith(before), "the damaged bytes stay as found (appended to only)"
    assert [m.seq for m in store.scan()] == [1, 4] and store.lost().msgs == (2,)


def test_a_damaged_header_of_an_empty_active_segment_is_rebuilt() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs)
    path = store.segments()[-1].path
    store.close()
    damaged = fs.after_crash("flush")
    damaged.flip_bit(path, 16 * 8)
    again = reopened(damaged)
    assert again.recovery.corrupt == [] and not again.lost().damaged
    assert again.store_msg("a", b"", b"first", 1) == 1


def test_a_damaged_record_of_a_message_deleted_later_loses_nothing() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs)
    for payload in (b"one", b"two", b"three"):
        store.store_msg("a", b"", payload, 1)
    offset = store.segments()[-1].offsets[2]  # type: ignore[union-attr]
    store.delete(2)
    path = store.segments()[-1].path
    store.close()
    damaged = fs.after_crash("flush")
    damaged.flip_bit(path, (offset + 30) * 8)
    again = reopened(damaged)
    lost = again.lost()
    assert lost.msgs == () and lost.count == 0 and lost.damaged, "damaged bytes, no message lost"
    assert "no message lost" in lost.regions[0]
    assert [m.payload for m in again.scan()] == [b"one", b"three"]
