"""The durable raft log file (appliance/store/raftlog.py): round trips, torn tails, corruption."""

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import CorruptData
from appliance.store.raftlog import (
    EntriesBatch,
    EntryRecord,
    HardStateRecord,
    OsLogFiles,
    RaftLogFile,
    SnapshotRecord,
    decode_all,
    encode_entries,
    encode_hard_state,
    encode_snapshot,
)
from appliance.testing.sim.disk import SimDisk

entry_lists = st.integers(1, 1000).flatmap(
    lambda first: st.lists(st.tuples(st.integers(0, 99), st.sampled_from([1, 2]), st.binary(max_size=40)),
                           min_size=1, max_size=6).map(
        lambda items: [EntryRecord(term, first + i, kind, data) for i, (term, kind, data) in enumerate(items)]))
records = st.one_of(
    entry_lists.map(lambda entries: (EntriesBatch(tuple(entries)), encode_entries(entries))),
    st.builds(HardStateRecord, st.integers(0, 2**40), st.text(max_size=8), st.integers(0, 2**40)).map(
        lambda r: (r, encode_hard_state(r))),
    st.builds(SnapshotRecord, st.integers(0, 2**40), st.integers(0, 99),
              st.lists(st.text(min_size=1, max_size=5), max_size=4).map(tuple), st.binary(max_size=64),
              st.lists(st.text(min_size=1, max_size=5), max_size=3).map(tuple)).map(  # learners
        lambda r: (r, encode_snapshot(r))),
)


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(st.lists(records, max_size=8))
def test_records_round_trip(pairs: list[tuple[object, bytes]]) -> None:
    data = b"".join(raw for _, raw in pairs)
    decoded, valid = decode_all(data)
    assert decoded == [record for record, _ in pairs]
    assert valid == len(data)


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_any_torn_tail_recovers_to_a_prefix_of_the_records(pairs: list[tuple[object, bytes]], data: st.DataObject) -> None:
    whole = b"".join(raw for _, raw in pairs)
    cut = data.draw(st.integers(0, len(whole)))
    disk = SimDisk()
    disk.replace("g", whole[:cut])
    recovered = RaftLogFile(disk, "g").recover()
    expected = [record for record, _ in pairs]
    assert recovered.records == expected[: len(recovered.records)]
    assert len(disk.read("g")) == cut - recovered.torn_bytes


def test_a_bad_record_in_the_middle_is_reported_not_dropped() -> None:
    first = encode_hard_state(HardStateRecord(1, "a", 0))
    second = encode_hard_state(HardStateRecord(2, "b", 1))
    damaged = bytearray(first + second)
    damaged[10] ^= 0xFF
    with pytest.raises(CorruptData):
        decode_all(bytes(damaged), name="g")


def test_a_torn_last_record_is_truncated_durably_on_open(tmp_path: Path) -> None:
    files = OsLogFiles(str(tmp_path))
    log = RaftLogFile(files, "g.raftlog")
    log.append_hard_state(HardStateRecord(1, "a", 0))
    log.append_entries([EntryRecord(1, 1, 1, b"x" * 100)])
    log.sync()
    files.close()
    path = tmp_path / "g.raftlog"
    path.write_bytes(path.read_bytes()[:-30])
    recovered = RaftLogFile(OsLogFiles(str(tmp_path)), "g.raftlog").recover()
    assert recovered.records == [HardStateRecord(1, "a", 0)]
    assert recovered.torn_bytes > 0
    assert path.stat().st_size == len(encode_hard_state(HardStateRecord(1, "a", 0)))


def test_the_simulated_disk_loses_unsynced_writes_and_may_tear_the_last_one() -> None:
    disk = SimDisk()
    disk.append("f", b"durable")
    disk.sync("f")
    disk.append("f", b"pending-bytes")
    assert disk.crash(random.Random(0), torn=False) == len(b"pending-bytes")
    assert disk.read("f") == b"durable"
    disk.append("f", b"0123456789")
    disk.crash(random.Random(3), torn=True)
    assert disk.read("f").startswith(b"durable")
    assert b"durable0123456789".startswith(disk.read("f"))


def test_a_log_damaged_in_the_middle_is_salvaged_rebuilt_and_kept_as_found(tmp_path: Path) -> None:
    """DurableStorage keeps the contiguous log before the damage (entries after a hole cannot be
    held), clamps the commit, rewrites the file cleanly and keeps the damaged one beside it."""
    from appliance.cluster.raft_storage import DurableStorage
    from appliance.raft.types import ConfState, Entry, EntryType, HardState

    files = OsLogFiles(str(tmp_path))
    storage = DurableStorage(files, "log", bootstrap=ConfState(("p",)))
    for index in range(1, 9):
        storage.save(HardState(1, "p", index), [Entry(1, index, EntryType.NORMAL, b"op %d" % index)], sync=True)
    files.close()
    path = tmp_path / "log"
    original = path.read_bytes()
    records, _ = decode_all(original)
    offsets, offset = [], 0
    for record in records:
        if isinstance(record, EntriesBatch):
            offsets.append(offset)
        offset += 8 + int.from_bytes(original[offset : offset + 4], "little")
    damaged = bytearray(original)
    damaged[offsets[len(offsets) // 2] + 10] ^= 0x20  # an entries record in the middle
    path.write_bytes(bytes(damaged))
    again = DurableStorage(OsLogFiles(str(tmp_path)), "log", bootstrap=ConfState(("p",)))
    assert again.damage and "damaged bytes" in again.damage[0]
    last = again.last_index()
    assert last == len(offsets) // 2, "the entries before the damaged record"
    assert [e.data for e in again.entries(1, last + 1, 1 << 20)] == [b"op %d" % i for i in range(1, last + 1)]
    assert again.hard_state().commit <= last
    assert (tmp_path / "log.damaged").read_bytes() == bytes(damaged)
    decode_all(path.read_bytes())  # the rebuilt log is clean: no CorruptData
    assert DurableStorage(OsLogFiles(str(tmp_path)), "log").damage == []


def test_learners_outlive_a_restart_in_the_snapshot_and_the_change_entries(tmp_path: Path) -> None:
    """Learner membership persists as voter membership does: in the snapshot record (a
    compacted log) and in the change entries after it."""
    from appliance.cluster.raft_storage import DurableStorage
    from appliance.raft.confchange import encode_conf_change
    from appliance.raft.core import RaftCore
    from appliance.raft.types import (ConfChange, ConfChangeOp, ConfState, Entry, EntryType, HardState,
                                      RaftConfig, Snapshot, SnapshotMeta)

    files = OsLogFiles(str(tmp_path))
    storage = DurableStorage(files, "log", bootstrap=ConfState(("a",)))
    change = ConfChange(ConfChangeOp.ADD_LEARNER, "c", ("a", "b"), ("c",))
    storage.save(HardState(1, "a", 3), [Entry(1, 1), Entry(1, 2, EntryType.CONF_CHANGE, encode_conf_change(change)),
                                        Entry(1, 3)], sync=True)
    reopened = DurableStorage(files, "log")
    core = RaftCore(RaftConfig(id="a"), reopened, random.Random(1), applied=3)
    assert core.voters == ("a", "b") and core.learners == ("c",)
    reopened.compact(Snapshot(SnapshotMeta(3, 1, core.conf_state()), b"state"))
    again = DurableStorage(files, "log")
    assert again.snapshot().meta.conf == ConfState(("a", "b"), ("c",))
    assert RaftCore(RaftConfig(id="a"), again, random.Random(1), applied=3).learners == ("c",)


def test_appends_go_into_preallocated_space_and_close_trims_it(tmp_path: Path) -> None:
    """A synced append does not grow the file (the fdatasync commits no new size): the space
    is allocated ahead of it; reads see only the data; closing trims the zero tail."""
    files = OsLogFiles(str(tmp_path))
    log = RaftLogFile(files, "g.raftlog")
    log.append_hard_state(HardStateRecord(1, "a", 0))
    log.sync()
    path = tmp_path / "g.raftlog"
    size = path.stat().st_size
    data = encode_hard_state(HardStateRecord(1, "a", 0))
    assert size > len(data), "preallocated ahead of the first append"
    log.append_entries([EntryRecord(1, 1, 1, b"x" * 100)])
    log.sync()
    assert path.stat().st_size == size, "the append went into space already allocated"
    assert files.read("g.raftlog") == data + encode_entries([EntryRecord(1, 1, 1, b"x" * 100)])
    files.close()
    assert path.read_bytes() == data + encode_entries([EntryRecord(1, 1, 1, b"x" * 100)])


def test_a_crash_leaves_preallocated_zeros_that_recovery_reads_as_unwritten_space(tmp_path: Path) -> None:
    """After a crash the file still ends in the zero bytes preallocated ahead of the writes:
    they are not damage (no salvage, nothing reported), and open trims them durably."""
    files = OsLogFiles(str(tmp_path))
    log = RaftLogFile(files, "g.raftlog")
    log.append_hard_state(HardStateRecord(1, "a", 0))
    log.append_entries([EntryRecord(1, 1, 1, b"x" * 100)])
    log.sync()
    path = tmp_path / "g.raftlog"
    crashed = path.read_bytes()  # as a crash leaves it: never closed, the zero tail still there
    assert crashed.endswith(b"\0" * 64)
    files.close()
    path.write_bytes(crashed)
    recovered = RaftLogFile(OsLogFiles(str(tmp_path)), "g.raftlog").recover()
    assert recovered.damaged == []
    assert recovered.records == [HardStateRecord(1, "a", 0), EntriesBatch((EntryRecord(1, 1, 1, b"x" * 100),))]
    assert not (tmp_path / "g.raftlog.damaged").exists()
    assert path.read_bytes() == encode_hard_state(HardStateRecord(1, "a", 0)) + encode_entries(
        [EntryRecord(1, 1, 1, b"x" * 100)])


def test_a_write_torn_over_preallocated_zeros_is_a_torn_tail() -> None:
    """A record whose last bytes never reached the disk (zeros where they belong, zeros after
    it) is a torn write like a short one at the end of the file, not damage in the middle."""
    first = encode_hard_state(HardStateRecord(1, "a", 0))
    torn = bytearray(encode_entries([EntryRecord(1, 1, 1, b"y" * 200)]))
    torn[-120:] = bytes(120)
    records, valid = decode_all(first + bytes(torn) + bytes(4096))
    assert records == [HardStateRecord(1, "a", 0)]
    assert valid == len(first)
    with pytest.raises(CorruptData):  # a bad record with data after it is still damage
        decode_all(first + bytes(torn) + bytes(64) + first)


class CountingDisk(SimDisk):
    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    def append(self, name: str, data: bytes) -> None:
        self.appends += 1
        super().append(name, data)


ready_entries = st.integers(1, 2**40).flatmap(lambda first: st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(1, 3), st.binary(max_size=40)), max_size=4).map(
    lambda rows: [EntryRecord(term, first + i, kind, data) for i, (term, kind, data) in enumerate(rows)]))
hard_states = st.none() | st.builds(HardStateRecord, st.integers(0, 2**40), st.text(max_size=8), st.integers(0, 2**40))


@settings(deadline=None)  # the machine is shared: no per-example deadline
@given(ready_entries, hard_states)
def test_a_ready_is_written_in_one_append_as_the_same_records(entries: list[EntryRecord],
                                                              state: HardStateRecord | None) -> None:
    """append_ready writes exactly the bytes of append_entries + append_hard_state, in one write,
    and they replay as the same records."""
    one, two = CountingDisk(), CountingDisk()
    RaftLogFile(one, "g").append_ready(entries, state)
    separate = RaftLogFile(two, "g")
    if entries:
        separate.append_entries(entries)
    if state is not None:
        separate.append_hard_state(state)
    assert one.read("g") == two.read("g")
    assert one.appends == (1 if entries or state is not None else 0)
    records, valid = decode_all(one.read("g"))
    expected = ([EntriesBatch(tuple(entries))] if entries else []) + ([state] if state is not None else [])
    assert records == expected and valid == len(one.read("g"))
