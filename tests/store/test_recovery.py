"""Recovery on open: torn tails are truncated and counted; damage elsewhere is reported, never served."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import CorruptData
from appliance.store import records, segment
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import ActiveSegment, SealedSegment
from appliance.testing.faultfs import FaultFS

DIRECTORY = "/s"


def small_store(fs: FaultFS, **kw: object) -> FileStreamStore:
    return FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=1500, block_raw_bytes=300, **kw), ops=fs)  # type: ignore[arg-type]


def filled(fs: FaultFS, count: int) -> dict[int, bytes]:
    store = small_store(fs)
    payloads = {}
    for i in range(count):
        payloads[store.store_msg(f"ev.{i % 2}", b"", b"event-%03d-" % i * 2, 1000 + i)] = b"event-%03d-" % i * 2
    store.close()
    return payloads


def test_a_torn_tail_is_truncated_counted_and_the_rest_served(tmp_path: Path) -> None:
    config = FileStoreConfig(str(tmp_path / "s"))
    store = FileStreamStore(config)
    for i in range(5):
        store.store_msg("a", b"", b"x%d" % i, i)
    store.close()
    active = tmp_path / "s" / segment.segment_name(1)
    whole = records.encode_msg(6, b"a", b"", b"torn-away", 6)
    with active.open("ab") as f:
        f.write(whole[: len(whole) // 2])
    size_before = active.stat().st_size
    reopened = FileStreamStore(config)
    assert reopened.recovery.torn_bytes == len(whole) // 2
    assert reopened.recovery.torn_segments == [str(active)]
    assert reopened.recovery.corrupt == []
    assert active.stat().st_size == size_before - len(whole) // 2
    assert [m.payload for m in reopened.scan()] == [b"x%d" % i for i in range(5)]
    assert reopened.store_msg("a", b"", b"again", 7) == 6


def test_a_damaged_record_in_the_middle_of_the_active_segment_is_reported_and_not_served() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs)
    for i in range(6):
        store.store_msg("a", b"", b"payload-%d" % i, i)
    offset = store.segments()[-1].offsets[3]  # type: ignore[union-attr]
    path = store.segments()[-1].path
    store.close()
    fs.flip_bit(path, (offset + records.HEAD_BYTES + 2) * 8)
    reopened = FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs)
    (region,) = reopened.recovery.corrupt
    assert (region.path, region.offset, region.first_seq, region.last_seq) == (path, offset, 3, 3)
    with pytest.raises(CorruptData) as caught:
        reopened.load(3)
    assert caught.value.path == path and caught.value.offset == offset
    assert [m.seq for m in reopened.scan()] == [1, 2, 4, 5, 6]
    assert reopened.state().last_seq == 6
    assert reopened.recovery.torn_bytes == 0


def test_a_damaged_block_in_a_sealed_segment_is_reported_with_file_and_offset() -> None:
    fs = FaultFS()
    payloads = filled(fs, 60)
    store = small_store(fs)
    sealed = [s for s in store.segments() if isinstance(s, SealedSegment)]
    assert len(sealed) >= 2 and len(sealed[0].blocks) >= 2
    victim = sealed[0].blocks[1]
    store.close()
    fs.flip_bit(sealed[0].path, (victim.data_offset + 3) * 8)
    reopened = small_store(fs)
    (region,) = reopened.recovery.corrupt
    assert (region.path, region.offset) == (sealed[0].path, victim.offset)
    assert (region.first_seq, region.last_seq) == (victim.first_seq, victim.last_seq)
    for seq, payload in payloads.items():
        if victim.first_seq <= seq <= victim.last_seq:
            with pytest.raises(CorruptData):
                reopened.load(seq)
        else:
            assert reopened.load(seq).payload == payload  # type: ignore[union-attr]
    assert reopened.state().last_seq == 60


def test_a_damaged_footer_is_rebuilt_from_the_block_headers_and_the_blocks_still_serve() -> None:
    fs = FaultFS()
    payloads = filled(fs, 30)
    store = small_store(fs)
    first = store.segments()[0]
    assert isinstance(first, SealedSegment)
    store.close()
    fs.flip_bit(first.path, (fs.size(first.path) - 40) * 8)  # inside the footer index
    reopened = small_store(fs)
    assert reopened.recovery.corrupt == []
    assert [r.split(":")[0] for r in reopened.recovery.repaired] == [first.path]
    assert segment.verify_sealed(fs.read_all(first.path), zdict=None) == [], "the file is whole again"
    assert {m.seq: m.payload for m in reopened.scan()} == payloads
    reopened.close()
    assert small_store(fs).recovery.repaired == [], "repaired once, on disk"


def test_the_per_stream_dictionary_is_trained_used_and_required() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=20_000, use_dictionary=True), ops=fs)
    payloads = {}
    for i in range(400):
        body = b'{"user":"u%d","action":"click","page":"/p/%d"}' % (i % 17, i % 5)
        payloads[store.store_msg("events", b"", body, i)] = body
    sealed = [s for s in store.segments() if isinstance(s, SealedSegment)]
    assert sealed and all(s.dict_id for s in sealed)
    store.close()
    assert fs.exists(DIRECTORY + "/stream.zdict")
    header = segment.decode_header(fs.read_all(sealed[0].path))
    assert header.dict_id == sealed[0].dict_id
    assert {m.seq: m.payload for m in small_store(fs, use_dictionary=True).scan()} == payloads
    fs.remove(DIRECTORY + "/stream.zdict")
    without = small_store(fs)
    assert without.recovery.corrupt and all("dictionary" in r.detail for r in without.recovery.corrupt)
    assert isinstance(without.segments()[-1], ActiveSegment)


def test_a_large_snapshot_restores_into_sealed_segments_and_reopens_the_same() -> None:
    source = FileStreamStore(FileStoreConfig("/src"), ops=FaultFS())
    for i in range(300):
        source.store_msg(f"r.{i % 5}", b"", b"restored-%03d" % i, i)
    source.purge("r.3")
    source.delete(300)
    fs = FaultFS()
    config = FileStoreConfig(DIRECTORY, segment_bytes=1500)
    restored = FileStreamStore.restore(config, source.snapshot(), ops=fs)
    assert sum(isinstance(s, SealedSegment) for s in restored.segments()) >= 3
    assert list(restored.scan()) == list(source.scan())
    assert restored.state() == source.state()
    restored.close()
    assert FileStreamStore(config, ops=fs).state() == source.state()
