"""FileStreamStore.repair: lost (damaged) sequences put back at their own sequences from a good copy.

Each test damages a store (a flipped byte in an active record, a damaged sealed block, a deleted
segment file), hands `repair` the messages a healthy replica holds, and checks that the store
then serves every message exactly as the good copy has it, reports no loss, and keeps it so
across a reopen (the file was rewritten, not only the memory). Property: any one damaged byte
of an active segment, repaired from the truth, gives back the whole stream.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import CorruptData
from appliance.store import records, segment
from appliance.store.api import StoredMsg
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import ActiveSegment, SealedSegment
from appliance.testing.faultfs import FaultFS, SimulatedCrash

DIRECTORY = "/d"


def config(**kw: object) -> FileStoreConfig:
    return FileStoreConfig(DIRECTORY, **kw)  # type: ignore[arg-type]


def fill(store: FileStreamStore, count: int, *, headers: bytes = b"") -> list[StoredMsg]:
    out = []
    for i in range(count):
        subject = f"orders.{i % 3}"
        payload = b"payload %d " % i + b"x" * (i % 17)
        seq = store.store_msg(subject, headers if i % 2 else b"", payload, 1_000 + i)
        out.append(StoredMsg(seq, subject, headers if i % 2 else b"", payload, 1_000 + i))
    return out


def record_span(fs: FaultFS, path: str, seq: int) -> tuple[int, int]:
    frames, _ = records.scan_frames(fs.read_all(path), segment.HEADER_BYTES)
    (span,) = [(f[0], f[1]) for f in frames if f[2] == records.Kind.MSG and f[3] == seq]
    return span


def flip(fs: FaultFS, path: str, offset: int) -> None:
    fs.flip_bit(path, offset * 8 + 3)


def all_served(store: FileStreamStore) -> list[StoredMsg]:
    return list(store.scan())


def test_a_flipped_byte_in_an_active_record_is_repaired_in_place() -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 20, headers=b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n")
    path = store.segments()[-1].path
    store.close()
    begin, end = record_span(fs, path, 7)
    flip(fs, path, (begin + end) // 2)
    store = FileStreamStore(config(), ops=fs)
    assert store.lost_ranges() == [(7, 7)]
    with pytest.raises(CorruptData, match="is lost"):
        store.load(7)
    assert store.repair([truth[6]]) == [7]
    assert store.lost_ranges() == [] and not store.lost().damaged
    assert all_served(store) == truth
    assert store.load(7) == truth[6]
    seq = store.store_msg("after", b"", b"repair", 5_000)  # appends go on after the rewrite
    assert seq == 21
    store.close()
    reopened = FileStreamStore(config(), ops=fs)
    assert not reopened.lost().damaged
    assert all_served(reopened) == [*truth, StoredMsg(21, "after", b"", b"repair", 5_000)]
    assert reopened.state().last_ts_ns == 5_000


def test_repair_is_all_or_nothing_per_damaged_stretch() -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 12)
    path = store.segments()[-1].path
    store.close()
    b5, _ = record_span(fs, path, 5)
    _, e6 = record_span(fs, path, 6)
    raw = fs.read_all(path)
    fs.create(path, raw[:b5] + b"\xff" * (e6 - b5) + raw[e6:])  # one stretch hiding 5 and 6
    store = FileStreamStore(config(), ops=fs)
    assert store.lost_ranges() == [(5, 6)]
    assert store.repair([truth[4]]) == []  # 6 not given: the stretch stays as it is
    assert store.lost_ranges() == [(5, 6)]
    assert store.repair([truth[4], truth[5], truth[8]]) == [5, 6]  # an extra message is ignored
    assert all_served(store) == truth


def test_a_sequence_the_good_copy_no_longer_holds_is_marked_removed() -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 10)
    path = store.segments()[-1].path
    store.close()
    begin, _ = record_span(fs, path, 4)
    flip(fs, path, begin + 20)
    store = FileStreamStore(config(), ops=fs)
    assert store.repair([], gone=[4]) == [4]
    assert not store.lost().damaged
    assert [m.seq for m in all_served(store)] == [s for s in range(1, 11) if s != 4]
    assert store.load(4) is None  # deleted, not lost
    store.close()
    reopened = FileStreamStore(config(), ops=fs)
    assert not reopened.lost().damaged and reopened.load(4) is None
    assert reopened.state().num_deleted == 1 and reopened.state().msgs == 9
    assert all_served(reopened) == [m for m in truth if m.seq != 4]


def test_the_last_record_damaged_is_repaired() -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 6)
    path = store.segments()[-1].path
    store.close()
    begin, end = record_span(fs, path, 6)
    flip(fs, path, end - 2)
    store = FileStreamStore(config(), ops=fs)
    assert store.lost_ranges() == [(6, 6)]
    assert store.repair(truth) == [6]
    assert all_served(store) == truth


@pytest.mark.parametrize("compress", [True, False])
def test_a_damaged_sealed_block_is_rebuilt(compress: bool) -> None:
    fs = FaultFS()
    cfg = config(segment_bytes=4096, block_raw_bytes=1024, compress=compress)
    store = FileStreamStore(cfg, ops=fs)
    truth = fill(store, 200)
    sealed = [s for s in store.segments() if isinstance(s, SealedSegment)]
    assert sealed
    seg = sealed[0]
    block = seg.blocks[1]
    store.close()
    flip(fs, seg.path, block.offset + segment.BLOCK_HEADER.size + 5)  # inside the block's data
    store = FileStreamStore(cfg, ops=fs)
    assert store.lost_ranges() == [(block.first_seq, block.last_seq)]
    assert store.repair(truth) == list(range(block.first_seq, block.last_seq + 1))
    assert all_served(store) == truth and not store.lost().damaged
    store.close()
    reopened = FileStreamStore(cfg, ops=fs)
    assert all_served(reopened) == truth and not reopened.lost().damaged


def test_damage_found_while_reading_is_repaired() -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 8)
    path = store.segments()[-1].path
    store.sync()
    begin, _ = record_span(fs, path, 3)
    flip(fs, path, begin + 12)  # under the open store: found by the next read
    served = all_served(store)
    assert [m.seq for m in served] == [1, 2, 4, 5, 6, 7, 8]
    assert store.lost_ranges() == [(3, 3)]
    assert store.repair(truth) == [3]
    assert all_served(store) == truth


def test_a_lost_segment_file_is_written_again() -> None:
    fs = FaultFS()
    cfg = config(segment_bytes=600, compress=False)
    store = FileStreamStore(cfg, ops=fs)
    truth = fill(store, 60)
    middle = store.segments()[1]
    first, last = middle.first_seq, store.segments()[2].first_seq - 1
    store.close()
    fs.remove(middle.path)
    store = FileStreamStore(cfg, ops=fs)
    assert store.lost_ranges() == [(first, last)]
    assert store.repair(truth) == list(range(first, last + 1))
    assert all_served(store) == truth
    store.close()
    assert os.path.basename(middle.path) in fs.list_dir(DIRECTORY)
    assert all_served(FileStreamStore(cfg, ops=fs)) == truth


def test_nothing_lost_nothing_repaired() -> None:
    store = FileStreamStore(config(), ops=FaultFS())
    truth = fill(store, 5)
    assert store.repair(truth) == []
    assert all_served(store) == truth


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(3, 30), st.integers(0, 2**31), st.integers(1, 255))
def test_any_damaged_byte_repaired_from_the_truth_gives_the_stream_back(count: int, where: int, xor: int) -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, count)
    active = store.segments()[-1]
    assert isinstance(active, ActiveSegment)
    size = active.size
    store.close()
    offset = segment.HEADER_BYTES + where % (size - segment.HEADER_BYTES)
    for bit in range(8):
        if xor >> bit & 1:
            fs.flip_bit(active.path, offset * 8 + bit)
    store = FileStreamStore(config(), ops=fs)
    lost = [s for lo, hi in store.lost_ranges() for s in range(lo, hi + 1)]
    store.repair(truth)
    served = all_served(store)
    if store.recovery.torn_bytes or not lost:
        # the last record read as a torn write (truncated), or its header damaged past knowing
        # its sequence: the store does not know it held it, so nothing names it lost (a replica
        # is then behind, and its log re-applies it)
        assert served == truth[: len(served)]
        return
    assert not store.lost().damaged, store.lost()
    assert served == truth, lost


def test_a_segment_unreadable_as_a_whole_is_written_again() -> None:
    fs = FaultFS()
    cfg = config(segment_bytes=600, compress=False)
    store = FileStreamStore(cfg, ops=fs)
    truth = fill(store, 60)
    middle = store.segments()[1]
    first, last = middle.first_seq, store.segments()[2].first_seq - 1
    store.close()
    raw = fs.read_all(middle.path)
    at = len(raw) // 2
    # the header and a byte inside damaged: recovery cannot rebuild the header from the contents
    fs.create(middle.path, b"\0" * segment.HEADER_BYTES + raw[segment.HEADER_BYTES : at] + bytes([raw[at] ^ 0x10])
              + raw[at + 1 :])
    store = FileStreamStore(cfg, ops=fs)
    assert store.lost_ranges() == [(first, last)]
    assert all(seg.path != middle.path for seg in store.segments())
    assert store.repair(truth) == list(range(first, last + 1))
    assert all_served(store) == truth and not store.lost().damaged
    store.close()
    assert all_served(FileStreamStore(cfg, ops=fs)) == truth


@pytest.mark.parametrize("mode", ["lose", "flush"])
def test_a_crash_anywhere_in_a_repair_leaves_the_record_lost_or_repaired_never_wrong(mode: str) -> None:
    fs = FaultFS()
    store = FileStreamStore(config(), ops=fs)
    truth = fill(store, 12)
    path = store.segments()[-1].path
    store.close()
    begin, end = record_span(fs, path, 5)
    flip(fs, path, (begin + end) // 2)
    damaged = fs.after_crash("flush")
    points = 0
    while True:
        disk = damaged.after_crash("flush")
        store = FileStreamStore(config(), ops=disk)
        disk.crash_at = disk.calls + points
        try:
            store.repair(truth)
        except SimulatedCrash:
            pass
        else:
            break
        finally:
            points += 1
        after = FileStreamStore(config(), ops=disk.after_crash(mode))  # type: ignore[arg-type]
        served = all_served(after)
        assert served in (truth, [m for m in truth if m.seq != 5]), points
        assert after.lost_ranges() == ([] if served == truth else [(5, 5)])
    assert points > 3  # the repair passed several crash points (write, fsync, rename, directory)
