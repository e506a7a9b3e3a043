"""The power-loss file layer for real processes (appliance/store/powerloss.py): what it leaves
after a power cut is what the simulator's FaultFS leaves (the same op sequences, compared), and a
FileStreamStore and a RAFT log on it keep every synced write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.store import powerloss
from appliance.store.fileops import FileOps, OsFileOps, write_atomic
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.powerloss import JournaledOps, PowerJournal, file_ops, power_loss
from appliance.store.raftlog import EntryRecord, HardStateRecord, OsLogFiles, RaftLogFile
from appliance.testing.faultfs import FaultFS


def journaled(tmp_path: Path) -> tuple[JournaledOps, str, str]:
    data, journal = tmp_path / "data", tmp_path / "journal"
    data.mkdir()
    return JournaledOps(OsFileOps(), PowerJournal(str(journal), sync_first=False)), str(data), str(journal)


def files_in(directory: str) -> dict[str, bytes]:
    return {name: (Path(directory) / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_unsynced_appends_are_dropped_and_synced_ones_kept(tmp_path: Path) -> None:
    ops, data, journal = journaled(tmp_path)
    path = os.path.join(data, "seg")
    ops.create(path, b"head")
    ops.fsync(path)
    ops.fsync_dir(data)
    ops.append(path, b"-synced")
    ops.fsync(path)
    ops.append(path, b"-lost")
    assert power_loss(journal) == [path]
    assert files_in(data) == {"seg": b"head-synced"}
    assert os.listdir(journal) == []  # the journals are consumed


def test_a_torn_cut_keeps_half_of_the_unsynced_bytes(tmp_path: Path) -> None:
    ops, data, journal = journaled(tmp_path)
    path = os.path.join(data, "seg")
    ops.create(path, b"0123")
    ops.fsync(path)
    ops.fsync_dir(data)
    ops.append(path, b"abcdefgh")
    power_loss(journal, torn=True)
    assert files_in(data) == {"seg": b"0123abcd"}


def test_names_are_durable_only_after_the_directory_is_synced(tmp_path: Path) -> None:
    ops, data, journal = journaled(tmp_path)
    (Path(data) / "old").write_bytes(b"before")  # on disk when the process started: durable
    (Path(data) / "gone").write_bytes(b"kept")
    synced = os.path.join(data, "synced")
    ops.create(synced, b"s")
    ops.fsync(synced)
    ops.fsync_dir(data)
    ops.create(os.path.join(data, "new"), b"n")  # fsynced, but its name never is
    ops.fsync(os.path.join(data, "new"))
    ops.create(os.path.join(data, "old.tmp"), b"after")
    ops.fsync(os.path.join(data, "old.tmp"))
    ops.rename(os.path.join(data, "old.tmp"), os.path.join(data, "old"))  # no fsync_dir after
    ops.remove(os.path.join(data, "gone"))
    power_loss(journal)
    assert files_in(data) == {"gone": b"kept", "old": b"before", "synced": b"s"}


def test_write_atomic_is_durable(tmp_path: Path) -> None:
    ops, data, journal = journaled(tmp_path)
    (Path(data) / "meta").write_bytes(b"v1")
    write_atomic(ops, os.path.join(data, "meta"), b"v2")
    power_loss(journal)
    assert files_in(data) == {"meta": b"v2"}


# --- the same op sequences on FaultFS and on the journaled real files ------------------------------

NAMES = ("a", "b", "c")
op_lists = st.lists(st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES), st.binary(max_size=6)),
    st.tuples(st.just("append"), st.sampled_from(NAMES), st.binary(min_size=1, max_size=6)),
    st.tuples(st.just("fsync"), st.sampled_from(NAMES)),
    st.tuples(st.just("fsync_dir"),),
    st.tuples(st.just("truncate"), st.sampled_from(NAMES), st.integers(0, 8)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
), max_size=25)


def apply(ops: FileOps, directory: str, steps: list[tuple[object, ...]]) -> None:
    for step in steps:
        kind = step[0]
        path = os.path.join(directory, str(step[1])) if len(step) > 1 else directory
        exists = ops.exists(path)
        if kind == "create":
            ops.create(path, step[2])  # type: ignore[arg-type]
        elif kind == "fsync_dir":
            ops.fsync_dir(directory)
        elif not exists:
            continue  # FaultFS needs the file; the real one would create it
        elif kind == "append":
            ops.append(path, step[2])  # type: ignore[arg-type]
        elif kind == "fsync":
            ops.fsync(path)
        elif kind == "truncate":
            ops.truncate(path, min(int(step[2]), ops.size(path)))  # type: ignore[call-overload]
        elif kind == "rename":
            if step[1] != step[2]:
                ops.rename(path, os.path.join(directory, str(step[2])))
        elif kind == "remove":
            ops.remove(path)


@settings(deadline=None, max_examples=150)  # the machine is shared: no per-example deadline
@given(op_lists)
def test_a_power_cut_leaves_what_faultfs_leaves(tmp_path_factory: pytest.TempPathFactory,
                                                 steps: list[tuple[object, ...]]) -> None:
    model = FaultFS()
    model.make_dirs("/d")
    apply(model, "/d", steps)
    expected = model.after_crash("lose")
    tmp = tmp_path_factory.mktemp("cut")
    ops, data, journal = journaled(tmp)
    apply(ops, data, steps)
    ops.close()
    power_loss(journal)
    assert files_in(data) == {name: expected.read_all(f"/d/{name}") for name in expected.list_dir("/d")}


# --- what runs on it ------------------------------------------------------------------------------

def test_without_the_variable_the_store_writes_through_the_plain_os_layer(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    monkeypatch.delenv(powerloss.ENV, raising=False)
    assert type(file_ops()) is OsFileOps
    monkeypatch.setenv(powerloss.ENV, str(tmp_path / "j"))
    assert type(file_ops()) is JournaledOps


def test_a_stream_store_keeps_every_synced_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    monkeypatch.setenv(powerloss.ENV, str(journal))
    directory = str(tmp_path / "msgs")
    os.makedirs(directory)
    store = FileStreamStore(FileStoreConfig(directory=directory, sync_always=False))
    for n in range(60):
        store.store_msg("s", b"", b"m%d" % n, n + 1)
        if n == 49:
            store.sync()
    # the process dies with the store open, ten messages not synced: the power goes
    assert power_loss(str(journal))
    again = FileStreamStore(FileStoreConfig(directory=directory, sync_always=False))
    try:
        assert again.state().msgs == 50
        loaded = again.load(50)
        assert loaded is not None and loaded.payload == b"m49"
    finally:
        again.close()


def test_a_new_raft_log_synced_once_survives_a_power_cut(tmp_path: Path) -> None:
    """Its name too: the log's first append syncs the directory (before, the synced records of a
    new group's log vanished with its name)."""
    ops, data, journal = journaled(tmp_path)
    log = RaftLogFile(OsLogFiles(data, ops), "log")
    log.append_hard_state(HardStateRecord(1, "a", 0))
    log.append_entries([EntryRecord(1, 1, 1, b"x" * 10)])
    log.sync()
    log.append_entries([EntryRecord(1, 2, 1, b"unsynced")])
    power_loss(journal)
    recovered = RaftLogFile(OsLogFiles(data, OsFileOps()), "log").recover()
    assert [type(r).__name__ for r in recovered.records] == ["HardStateRecord", "EntriesBatch"]
    assert recovered.records[1].entries == (EntryRecord(1, 1, 1, b"x" * 10),)  # type: ignore[union-attr]


def test_a_directory_whose_name_was_never_synced_vanishes_with_its_files(tmp_path: Path) -> None:
    ops, data, journal = journaled(tmp_path)
    fresh = os.path.join(data, "fresh")
    ops.make_dir(fresh)  # one level, its parent never synced
    ops.create(os.path.join(fresh, "f"), b"x")
    ops.fsync(os.path.join(fresh, "f"))
    ops.fsync_dir(fresh)
    power_loss(journal)
    assert os.listdir(data) == []


def test_a_store_in_a_new_directory_keeps_its_synced_messages(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """make_dirs is durable: before, a new stream's directories were made without syncing their
    parents, and a power cut could take the stream's synced messages with the directory."""
    journal = tmp_path / "journal"
    monkeypatch.setenv(powerloss.ENV, str(journal))
    directory = str(tmp_path / "jetstream" / "APP" / "streams" / "S" / "msgs")
    store = FileStreamStore(FileStoreConfig(directory=directory, sync_always=True))
    for n in range(5):
        store.store_msg("s", b"", b"m%d" % n, n + 1)
    store.sync()
    power_loss(str(journal))
    again = FileStreamStore(FileStoreConfig(directory=directory, sync_always=True))
    try:
        assert again.state().msgs == 5
    finally:
        again.close()
