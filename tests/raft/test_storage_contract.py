"""One contract for every LogStorage: memory, durable on the simulated disk, durable on real files."""

from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.cluster.raft_storage import DurableStorage
from appliance.raft.storage import LogStorage, MemoryStorage
from appliance.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from appliance.store.raftlog import OsLogFiles
from appliance.testing.sim.disk import SimDisk

CONF = ConfState(("a", "b", "c"))
Factory = Callable[[Path], LogStorage]


def memory(tmp_path: Path) -> LogStorage:
    return MemoryStorage(CONF)


def durable_sim(tmp_path: Path) -> LogStorage:
    return DurableStorage(SimDisk(), "g.raftlog", bootstrap=CONF)


def durable_os(tmp_path: Path) -> LogStorage:
    return DurableStorage(OsLogFiles(str(tmp_path)), "g.raftlog", bootstrap=CONF)


@pytest.fixture(params=[memory, durable_sim, durable_os], ids=["memory", "durable-simdisk", "durable-files"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> LogStorage:
    factory: Factory = request.param
    return factory(tmp_path)


def entries(first: int, last: int, term: int) -> list[Entry]:
    return [Entry(term, index, data=f"e{index}".encode()) for index in range(first, last + 1)]


def test_a_new_storage_is_empty_with_the_bootstrap_voters(storage: LogStorage) -> None:
    hard_state, conf = storage.initial_state()
    assert hard_state == HardState()
    assert conf == CONF
    assert (storage.first_index(), storage.last_index(), storage.term(0)) == (1, 0, 0)


def test_saved_entries_and_hard_state_are_read_back(storage: LogStorage) -> None:
    storage.save(HardState(2, "a", 3), entries(1, 5, 2), sync=True)
    assert storage.initial_state()[0] == HardState(2, "a", 3)
    assert storage.last_index() == 5
    assert storage.term(4) == 2
    assert [e.index for e in storage.entries(2, 5, 1 << 20)] == [2, 3, 4]


def test_entries_are_bounded_by_bytes_but_never_empty(storage: LogStorage) -> None:
    storage.save(None, entries(1, 5, 1), sync=True)
    assert len(storage.entries(1, 6, 1)) == 1
    assert len(storage.entries(1, 6, 2 * entries(1, 1, 1)[0].size_bytes())) == 2


def test_a_conflicting_append_replaces_the_tail(storage: LogStorage) -> None:
    storage.save(None, entries(1, 5, 1), sync=True)
    storage.save(None, entries(3, 4, 2), sync=True)
    assert storage.last_index() == 4
    assert [storage.term(i) for i in range(1, 5)] == [1, 1, 2, 2]


def test_compaction_keeps_the_snapshot_and_later_entries(storage: LogStorage) -> None:
    storage.save(HardState(1, "a", 5), entries(1, 6, 1), sync=True)
    storage.compact(Snapshot(SnapshotMeta(4, 1, CONF), b"state@4"))
    assert storage.first_index() == 5
    assert storage.term(4) == 1
    assert storage.snapshot().data == b"state@4"
    assert [e.index for e in storage.entries(5, 7, 1 << 20)] == [5, 6]


def test_applying_a_snapshot_replaces_the_whole_log(storage: LogStorage) -> None:
    storage.save(HardState(1, "", 2), entries(1, 3, 1), sync=True)
    storage.apply_snapshot(Snapshot(SnapshotMeta(10, 3, ConfState(("a", "b"))), b"s"))
    assert (storage.first_index(), storage.last_index(), storage.term(10)) == (11, 10, 3)
    assert storage.initial_state()[1] == ConfState(("a", "b"))
    assert storage.initial_state()[0].commit == 10


def test_durable_storage_recovers_everything_that_was_synced(tmp_path: Path) -> None:
    files = OsLogFiles(str(tmp_path))
    first = DurableStorage(files, "g.raftlog", bootstrap=CONF)
    first.save(HardState(3, "b", 4), entries(1, 6, 3), sync=True)
    first.compact(Snapshot(SnapshotMeta(2, 3, CONF), b"at2"))
    first.save(None, entries(7, 8, 3), sync=True)
    files.close()
    again = DurableStorage(OsLogFiles(str(tmp_path)), "g.raftlog")
    assert again.initial_state() == (HardState(3, "b", 4), CONF)
    assert (again.first_index(), again.last_index()) == (3, 8)
    assert again.snapshot().data == b"at2"


def test_a_crash_loses_only_unsynced_writes() -> None:
    disk = SimDisk()
    storage = DurableStorage(disk, "g.raftlog", bootstrap=CONF)
    storage.save(HardState(1, "a", 0), entries(1, 3, 1), sync=True)
    storage.save(None, entries(4, 9, 1), sync=False)
    disk.crash(__import__("random").Random(1), torn=True)
    recovered = DurableStorage(disk, "g.raftlog")
    assert 3 <= recovered.last_index() <= 9
    assert recovered.initial_state()[0] == HardState(1, "a", 0)
