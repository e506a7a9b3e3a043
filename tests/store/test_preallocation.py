"""Preallocated active segments (fileops.py): the file is extended ahead of its writes, the zero
tail is never data, and whatever a crash leaves (a zero tail, a torn record before it, a new
segment that is nothing but zeros) recovers to exactly the written records."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import limits
from appliance.store import records, segment
from appliance.store.fileops import OsFileOps
from appliance.store.filestore import FileStoreConfig, FileStreamStore

CHUNK = 64 * 1024
KILL_DEADLINE_S = 30.0


def store_in(directory: Path, **kw: object) -> FileStreamStore:
    return FileStreamStore(FileStoreConfig(str(directory), **kw))  # type: ignore[arg-type]


def crash_image(source: Path, target: Path) -> Path:
    """The directory as an open store leaves it (what a crash leaves, data being in the page cache)."""
    shutil.copytree(source, target)
    return target


def active_file(directory: Path) -> Path:
    return sorted(directory.glob("*.seg"))[-1]


# --- OsFileOps ---------------------------------------------------------------------------------


def test_appends_extend_the_file_ahead_and_reads_see_only_the_data(tmp_path: Path) -> None:
    ops = OsFileOps(preallocate_bytes=CHUNK)
    path = str(tmp_path / "f")
    ops.create(path, b"head")
    ops.append(path, b"-one")
    assert os.path.getsize(path) >= 8 + CHUNK  # extended ahead
    assert ops.size(path) == 8
    assert ops.read_all(path) == b"head-one"
    assert ops.read_at(path, 4, 1000) == b"-one"  # never the zero tail
    assert ops.read_at(path, 8, 10) == b""
    ops.append(path, b"-two")
    assert ops.read_all(path) == b"head-one-two"
    ops.close_file(path)
    assert Path(path).read_bytes() == b"head-one-two"  # the unused tail is trimmed on close


def test_the_space_ahead_grows_with_the_file_up_to_the_limit(tmp_path: Path) -> None:
    ops = OsFileOps(preallocate_bytes=4 * limits.STORE_PREALLOCATE_MIN_BYTES)
    path = str(tmp_path / "f")
    ops.create(path, b"h")
    ops.append(path, b"x")
    assert os.path.getsize(path) == 2 + limits.STORE_PREALLOCATE_MIN_BYTES  # a small file: the minimum
    block = b"y" * 4096
    while ops.size(path) < 10 * limits.STORE_PREALLOCATE_MIN_BYTES:
        ops.append(path, block)
        ahead = os.path.getsize(path) - ops.size(path)
        assert 0 <= ahead <= 4 * limits.STORE_PREALLOCATE_MIN_BYTES + len(block)  # never past the limit
    ops.close()
    blocks = (10 * limits.STORE_PREALLOCATE_MIN_BYTES - 2 + len(block) - 1) // len(block)
    assert os.path.getsize(path) == 2 + len(block) * blocks  # trimmed to the data


def test_a_write_larger_than_the_chunk_is_covered_whole(tmp_path: Path) -> None:
    ops = OsFileOps(preallocate_bytes=CHUNK)
    path = str(tmp_path / "f")
    ops.create(path, b"")
    big = os.urandom(3 * CHUNK + 5)
    ops.append(path, big)
    assert os.path.getsize(path) >= len(big)
    ops.append(path, b"end")
    assert ops.read_all(path) == big + b"end"
    ops.close()
    assert Path(path).read_bytes() == big + b"end"


def test_reopening_a_file_continues_at_its_end(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    first = OsFileOps(preallocate_bytes=CHUNK)
    first.create(path, b"abc")
    first.close()
    second = OsFileOps(preallocate_bytes=CHUNK)
    second.append(path, b"def")
    assert second.read_all(path) == b"abcdef"
    second.truncate(path, 2)
    second.append(path, b"Z")
    second.close()
    assert Path(path).read_bytes() == b"abZ"


def test_without_fallocate_support_appends_stay_plain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    ops = OsFileOps(preallocate_bytes=CHUNK)
    path = str(tmp_path / "f")
    ops.create(path, b"a")
    ops.append(path, b"b")
    ops.append(path, b"c")
    assert os.path.getsize(path) == 3
    assert ops.read_all(path) == b"abc"
    ops.close()


# --- the store ---------------------------------------------------------------------------------


def test_the_active_segment_is_preallocated_and_every_message_reads_back_as_it_is_appended(
    tmp_path: Path,
) -> None:
    store = store_in(tmp_path / "s")
    for i in range(300):  # each load right after its store: a read-ahead never holds the zero tail
        seq = store.store_msg("a", b"", b"m%03d" % i, i)
        loaded = store.load(seq)
        assert loaded is not None and loaded.payload == b"m%03d" % i
    written = store.segments()[-1].size
    assert active_file(tmp_path / "s").stat().st_size > written  # allocated ahead
    store.close()
    assert active_file(tmp_path / "s").stat().st_size == written  # trimmed


def test_a_crash_leaves_a_zero_tail_that_recovery_trims_without_calling_it_torn(tmp_path: Path) -> None:
    store = store_in(tmp_path / "s")
    for i in range(50):
        store.store_msg("a.%d" % (i % 3), b"", b"payload-%d" % i, 1000 + i)
    written = store.segments()[-1].size
    image = crash_image(tmp_path / "s", tmp_path / "crashed")
    store.close()
    assert active_file(image).stat().st_size > written  # the zero tail is on disk
    recovered = store_in(image)
    assert recovered.recovery.torn_bytes == 0 and recovered.recovery.torn_segments == []
    assert recovered.recovery.corrupt == []
    assert [m.payload for m in recovered.scan()] == [b"payload-%d" % i for i in range(50)]
    assert active_file(image).stat().st_size == written
    assert recovered.store_msg("a.0", b"", b"after", 2000) == 51
    recovered.close()
    again = store_in(image)
    assert [m.seq for m in again.scan()] == list(range(1, 52))
    assert again.recovery.torn_bytes == 0
    again.close()


def test_a_torn_record_before_the_zero_tail_is_still_torn(tmp_path: Path) -> None:
    store = store_in(tmp_path / "s")
    for i in range(5):
        store.store_msg("a", b"", b"x%d" % i, i)
    written = store.segments()[-1].size
    image = crash_image(tmp_path / "s", tmp_path / "crashed")
    store.close()
    whole = records.encode_msg(6, b"a", b"", b"torn-away", 6)
    with active_file(image).open("r+b") as f:  # half a record landed, the rest of the tail is zeros
        f.seek(written)
        f.write(whole[: len(whole) // 2])
    recovered = store_in(image)
    assert recovered.recovery.torn_segments == [str(active_file(image))]
    assert recovered.recovery.torn_bytes >= len(whole) // 2
    assert recovered.recovery.corrupt == []
    assert [m.payload for m in recovered.scan()] == [b"x%d" % i for i in range(5)]
    assert active_file(image).stat().st_size == written
    recovered.close()


def test_a_new_segment_that_is_only_zeros_is_removed_as_torn(tmp_path: Path) -> None:
    store = store_in(tmp_path / "s")
    for i in range(5):
        store.store_msg("a", b"", b"x%d" % i, i)
    store.close()
    lost = tmp_path / "s" / segment.segment_name(6)  # rolled into, then the crash lost its header
    lost.write_bytes(bytes(limits.STORE_PREALLOCATE_MIN_BYTES))
    recovered = store_in(tmp_path / "s")
    assert recovered.recovery.torn_segments == [str(lost)]
    assert recovered.recovery.corrupt == []
    assert [m.payload for m in recovered.scan()] == [b"x%d" % i for i in range(5)]
    assert recovered.store_msg("a", b"", b"x5", 5) == 6
    recovered.close()


def test_a_closed_segment_with_a_zero_tail_is_trimmed_not_reported(tmp_path: Path) -> None:
    store = store_in(tmp_path / "s", segment_bytes=4096, seal_inline=False)
    payloads = [b"p%04d" % i * 20 for i in range(120)]
    for i, payload in enumerate(payloads):
        store.store_msg("a", b"", payload, i)
    store.close()
    files = sorted((tmp_path / "s").glob("*.seg"))
    assert len(files) > 2
    closed = files[0]
    size = closed.stat().st_size
    with closed.open("ab") as f:  # as if the crash came between the roll and its trim
        f.write(bytes(CHUNK))
    recovered = store_in(tmp_path / "s", segment_bytes=4096, seal_inline=False)
    assert recovered.recovery.corrupt == [] and recovered.recovery.torn_bytes == 0
    assert closed.stat().st_size == size
    assert [m.payload for m in recovered.scan()] == payloads
    recovered.close()


def test_rolled_segments_are_trimmed_and_sealed_from_their_data_only(tmp_path: Path) -> None:
    store = store_in(tmp_path / "s", segment_bytes=4096)
    payloads = [b"q%04d" % i * 30 for i in range(200)]
    for i, payload in enumerate(payloads):
        store.store_msg("b.%d" % (i % 4), b"", payload, i)
    sealed = [s for s in store.segments()[:-1]]
    assert sealed and all(os.path.getsize(s.path) < 4096 + 2048 for s in sealed)
    assert [m.payload for m in store.scan()] == payloads
    store.close()
    reopened = store_in(tmp_path / "s", segment_bytes=4096)
    assert reopened.recovery.corrupt == [] and reopened.recovery.torn_bytes == 0
    assert [m.payload for m in reopened.scan()] == payloads
    reopened.close()


# --- kill -9 -------------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from appliance.store.filestore import FileStoreConfig, FileStreamStore
    store = FileStreamStore(FileStoreConfig(sys.argv[1], segment_bytes=64 * 1024))
    i = 0
    while True:
        store.append_batch([("k.%d" % (i % 5), b"", b"v%06d" % i, i)])
        job = store.begin_sync()
        if job is not None:
            job.run()
            print(store.finish_sync(job), flush=True)  # acknowledged: durable from here on
        i += 1
    """
)


def test_kill_9_mid_stream_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], stdout=subprocess.PIPE,
                             cwd=Path(__file__).resolve().parents[2])
    assert child.stdout is not None
    acknowledged = 0
    deadline = time.monotonic() + KILL_DEADLINE_S
    try:
        while acknowledged < 400 and time.monotonic() < deadline:  # several segments rolled
            line = child.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(KILL_DEADLINE_S)
        child.stdout.close()
    assert acknowledged >= 400, "the writer did not get far enough"
    recovered = store_in(directory, segment_bytes=64 * 1024)
    assert recovered.recovery.corrupt == []
    assert recovered.recovery.torn_bytes == 0  # a killed process loses nothing it wrote
    seqs = [m.seq for m in recovered.scan()]
    assert seqs[: acknowledged] == list(range(1, acknowledged + 1))
    assert all(m.payload == b"v%06d" % (m.seq - 1) for m in recovered.scan())
    recovered.close()


def test_inspect_verify_passes_a_zero_tail_and_still_finds_a_torn_record(tmp_path: Path) -> None:
    from appliance.store.inspect import verify

    store = store_in(tmp_path / "s")
    for i in range(10):
        store.store_msg("a", b"", b"v%d" % i, i)
    written = store.segments()[-1].size
    image = crash_image(tmp_path / "s", tmp_path / "crashed")
    store.close()
    assert verify(str(image)) == []  # the preallocated tail of a running (or crashed) store
    with active_file(image).open("r+b") as f:
        f.seek(written)
        f.write(records.encode_msg(11, b"a", b"", b"half", 11)[:20])
    problems = verify(str(image))
    assert len(problems) == 1 and "torn tail" in str(problems[0])


# --- property: whatever suffix of the unsynced writes a crash loses ---------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload_sizes=st.lists(st.integers(min_value=0, max_value=600), min_size=1, max_size=30),
    synced=st.integers(min_value=0, max_value=30),
    cut=st.floats(min_value=0.0, max_value=1.0),
)
def test_losing_any_unsynced_suffix_recovers_exactly_the_whole_records_before_it(
    tmp_path_factory: pytest.TempPathFactory, payload_sizes: list[int], synced: int, cut: float
) -> None:
    """The disk keeps a prefix of the file up to some byte at or after the last sync; the rest of
    the preallocated file reads as zeros. Recovery serves exactly the records wholly inside that
    prefix, never reports corruption, and calls it torn only when part of a record is left."""
    root = tmp_path_factory.mktemp("crash")
    store = store_in(root / "s")
    synced = min(synced, len(payload_sizes))
    ends = []
    for i, size in enumerate(payload_sizes):
        store.store_msg("p.%d" % (i % 3), b"", bytes([i % 251 + 1]) * size, i)
        ends.append(store.segments()[-1].size)
        if i + 1 == synced:
            store.sync()
    start = segment.HEADER_BYTES if synced == 0 else ends[synced - 1]
    kept = start + round(cut * (ends[-1] - start))  # the crash keeps bytes [0, kept)
    image = crash_image(root / "s", root / "crashed")
    store.close()
    path = active_file(image)
    length = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(kept)
        f.write(bytes(length - kept))
    recovered = store_in(image)
    whole = sum(1 for end in ends if end <= kept)
    assert recovered.recovery.corrupt == []
    assert [m.seq for m in recovered.scan()] == list(range(1, whole + 1))
    expected = [bytes([i % 251 + 1]) * payload_sizes[i] for i in range(whole)]
    assert [m.payload for m in recovered.scan()] == expected
    boundaries = {segment.HEADER_BYTES, *ends}
    if recovered.recovery.torn_bytes:
        assert kept not in boundaries  # torn only when a record was cut
    assert path.stat().st_size == (max(e for e in boundaries if e <= kept))
    recovered.close()
