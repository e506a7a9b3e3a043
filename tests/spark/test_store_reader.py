"""The offline `jetstream-store` reader on a stream directory with sealed and active segments,
removals (delete, erase, purge), block pruning by time, and a flipped byte."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from appliance.spark import store_files  # noqa: E402
from appliance.spark.source_store import corrupt_blocks  # noqa: E402
from appliance.store.filestore import FileStoreConfig, FileStreamStore  # noqa: E402
from appliance.store.inspect import dump  # noqa: E402

pytestmark = [pytest.mark.timeout(300)]

T0 = 1_800_000_000_000_000_000


def make_stream(root: Path) -> Path:
    directory = root / "ACC" / "streams" / "ORDERS" / "msgs"
    store = FileStreamStore(FileStoreConfig(str(directory), sync_always=False, segment_bytes=8192, block_raw_bytes=1024))
    for i in range(600):
        headers = b"NATS/1.0\r\nX-I: %d\r\nX-I: again\r\n\r\n" % i if i % 5 == 0 else b""
        store.store_msg(f"orders.{i % 4}", headers, b"payload-%04d" % i, T0 + i * 1_000_000_000)
    store.delete(10)
    store.delete(300, erase=True)
    store.delete(590)
    store.purge(up_to_seq=5)
    store.sync()
    store.close()
    kinds = [store_files.segment.decode_header(p.read_bytes()).sealed for p in sorted(directory.glob("*.seg"))]
    assert True in kinds and False in kinds, kinds
    return directory


def rows_of(df) -> list[tuple[object, ...]]:
    return sorted((r.stream, r.seq, r.subject, r.data, dict(r.headers)) for r in df.collect())


def test_reads_what_the_store_serves(spark, tmp_path: Path) -> None:
    directory = make_stream(tmp_path)
    want = sorted(("ORDERS", m.seq, m.subject, m.payload, _headers(m.headers)) for m in dump(str(directory)))
    assert len(want) == 600 - 4 - 3  # purge below 5 removes 1..4
    for path in (tmp_path, directory, directory.parent):
        df = spark.read.format("jetstream-store").load(str(path))
        assert rows_of(df) == want
    sub = spark.read.format("jetstream-store").option("subject", "orders.1").option("startSeq", "100").load(str(tmp_path))
    assert rows_of(sub) == [w for w in want if w[2] == "orders.1" and w[1] >= 100]


def _headers(block: bytes) -> dict[str, list[str]]:
    from appliance.spark.directget import stored_headers

    return stored_headers(block)


def test_a_time_range_reads_only_its_blocks(spark, tmp_path: Path) -> None:
    directory = make_stream(tmp_path)
    stream = store_files.stream_dirs(str(tmp_path))[0]
    every = store_files.plan_stream(stream, 1, store_files.SEQ_MAX, store_files.TIME_MIN_NS, store_files.TIME_MAX_NS,
                                    skip_corrupt=False)
    lo, hi = T0 + 100 * 10**9, T0 + 120 * 10**9
    some = store_files.plan_stream(stream, 1, store_files.SEQ_MAX, lo, hi, skip_corrupt=False)
    assert 0 < len(some.pieces) < len(every.pieces) // 4
    df = spark.read.format("jetstream-store").load(str(directory))
    got = sorted(r.seq for r in df.where(f"time >= timestamp_micros({lo // 1000}) AND time <= timestamp_micros({hi // 1000})").collect())
    assert got == list(range(101, 122))


def test_a_flipped_byte_fails_with_file_and_offset_or_is_skipped_and_counted(spark, tmp_path: Path) -> None:
    directory = make_stream(tmp_path)
    sealed = next(p for p in sorted(directory.glob("*.seg")) if store_files.segment.decode_header(p.read_bytes()).sealed)
    blocks, _ = store_files.segment.read_footer(sealed.read_bytes())
    target = blocks[1]
    data = bytearray(sealed.read_bytes())
    data[target.data_offset + 5] ^= 0x40
    sealed.write_bytes(bytes(data))
    df = spark.read.format("jetstream-store").load(str(directory))
    with pytest.raises(Exception, match=f"{sealed.name}:{target.offset}"):
        df.collect()
    skipped = spark.read.format("jetstream-store").option("corrupt", "skip").load(str(directory)).collect()
    assert len(skipped) == 593 - target.msg_count
    problems = corrupt_blocks(str(directory))
    assert [(Path(p.path).name, p.offset) for p in problems] == [(sealed.name, target.offset)]
