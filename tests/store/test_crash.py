"""Crash consistency: at every crash point of a workload, acknowledged writes survive and nothing is half-present.

The workload runs on FaultFS with `crash_at=k` for every k until it completes without crashing.
For each crash the disk is rebuilt three ways (lose unsynced data, tear the last write, flush
everything) and the store reopened. The recovered stream must equal a model (MemoryStreamStore)
after the acknowledged operations, plus possibly the operation in flight (for a batch: any
prefix of it). Sealing happens every few messages, so crash points inside sealing are walked too.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from appliance.store.api import StoreLimits, StoredMsg, StreamStore
from appliance.store.commit import GroupCommitter
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SEAL_TMP_SUFFIX
from appliance.store.memory import MemoryStreamStore
from appliance.store.sealer import BackgroundSealer
from appliance.testing.faultfs import FaultFS, SimulatedCrash

DIRECTORY = "/stream"
MODES = ("lose", "torn", "flush")


@dataclass(frozen=True)
class Op:
    kind: str  # batch | delete | erase | purge | compact
    msgs: tuple[tuple[str, bytes, bytes, int], ...] = ()
    seq: int = 0
    subject: str = ""
    keep: int = 0


def batch(start: int, count: int, subject: str = "ev") -> Op:
    return Op("batch", tuple((f"{subject}.{i % 3}", b"", b"payload-%04d" % i * 3, 1000 + i) for i in range(start, start + count)))


WORKLOAD = [
    batch(0, 3), batch(3, 5), Op("delete", seq=2), batch(8, 6), Op("erase", seq=5),
    Op("purge", subject="ev.1", keep=1), batch(14, 4), Op("compact", seq=7), batch(18, 7), Op("delete", seq=20),
    batch(25, 2), Op("purge"), batch(27, 3),
]


def apply(store: StreamStore, op: Op) -> None:
    if op.kind == "batch":
        store.store_batch(list(op.msgs))
    elif op.kind == "delete":
        store.delete(op.seq)
    elif op.kind == "erase":
        store.delete(op.seq, erase=True)
    elif op.kind == "purge":
        store.purge(op.subject, keep=op.keep)
    else:
        store.compact(op.seq)


def picture(store: StreamStore) -> tuple[list[StoredMsg], int, int, int]:
    state = store.state()
    return list(store.scan()), state.first_seq, state.last_seq, state.num_subjects


def acceptable(acked: int, limits: StoreLimits) -> list[tuple[list[StoredMsg], int, int, int]]:
    """Every stream picture a crash during operation number `acked` may leave."""
    model = MemoryStreamStore(limits)
    for op in WORKLOAD[:acked]:
        apply(model, op)
    pictures = [picture(model)]
    if acked < len(WORKLOAD):
        op = WORKLOAD[acked]
        if op.kind == "batch":
            for n in range(1, len(op.msgs) + 1):
                partial = MemoryStreamStore.restore(model.snapshot(), limits)
                partial.store_batch(list(op.msgs[:n]))
                pictures.append(picture(partial))
        else:
            apply(model, op)
            pictures.append(picture(model))
    return pictures


def config(limits: StoreLimits, *, seal_inline: bool = True) -> FileStoreConfig:
    return FileStoreConfig(DIRECTORY, limits=limits, segment_bytes=700, seal_inline=seal_inline)


class StepExecutor(concurrent.futures.Executor):
    """The sealer's thread, stepped by the workload: a job runs when the test says so."""

    def __init__(self) -> None:
        self.queued: deque[tuple[Callable[[], None], concurrent.futures.Future[None]]] = deque()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.queued.append((lambda: fn(*args, **kwargs), future))
        return future

    def step(self) -> None:
        if self.queued:
            fn, future = self.queued.popleft()
            fn()  # a SimulatedCrash here is the machine going down mid-seal
            future.set_result(None)


def run(fs: FaultFS, limits: StoreLimits, *, seal: str) -> int:
    """Run the workload; returns how many operations were acknowledged before a crash.

    seal="manual": a seal job runs after every other operation, so closed segments wait unsealed
    for a while. seal="sealer": a BackgroundSealer seals; after each operation its thread writes
    the compressed copy, and the owner installs it only after the next operation, so the walk
    crashes with a seal in progress (temporary file half written, written, renamed, not yet
    fsynced into the directory) while the stream keeps changing.
    """
    acked = 0
    executor = StepExecutor()
    posted: deque[Callable[[], None]] = deque()
    sealer = BackgroundSealer(posted.append, executor=executor) if seal == "sealer" else None
    try:
        store = FileStreamStore(config(limits, seal_inline=seal == "inline"), ops=fs, sealer=sealer)
        for number, op in enumerate(WORKLOAD):
            apply(store, op)
            acked += 1
            while posted:
                posted.popleft()()
            executor.step()
            if seal == "manual" and number % 2:
                job = store.begin_seal()
                if job is not None:
                    job.run()
                    store.finish_seal(job)
    except SimulatedCrash:
        pass
    return acked


@pytest.mark.parametrize(
    ("limits", "seal"),
    [(StoreLimits(), "inline"), (StoreLimits(max_msgs=6), "inline"), (StoreLimits(), "manual"),
     (StoreLimits(), "sealer"), (StoreLimits(max_msgs=6), "sealer")],
    ids=["no-limits", "max_msgs", "background-seal", "sealer", "sealer-max_msgs"],
)
def test_every_crash_point_keeps_acknowledged_writes_and_nothing_half_present(limits: StoreLimits, seal: str) -> None:
    seal_inline = seal == "inline"
    total = None
    crash_at = 0
    sealed_seen = False
    while total is None:
        fs = FaultFS(crash_at=crash_at)
        acked = run(fs, limits, seal=seal)
        if not fs.crashed:
            total = crash_at
            assert acked == len(WORKLOAD)
            break
        sealed_seen |= any(name.endswith(SEAL_TMP_SUFFIX) for name in fs.list_dir(DIRECTORY))
        allowed = acceptable(acked, limits)
        for mode in MODES:
            recovered = FileStreamStore(config(limits, seal_inline=seal_inline), ops=fs.after_crash(mode))
            seen = picture(recovered)
            assert seen in allowed, f"crash at call {crash_at} ({mode}) after {acked} acked ops"
            seq = recovered.store_msg("after.crash", b"", b"x", 1)
            assert seq == seen[2] + 1
        crash_at += 1
    assert total > 40, "the walk covered the workload's calls"
    if seal == "sealer":
        assert sealed_seen, "the walk crashed while a sealed copy waited to be installed"


def test_group_commit_tickets_are_durable_only_after_their_fsync() -> None:
    limits = StoreLimits()
    crash_at = 0
    while True:
        fs = FaultFS(crash_at=crash_at)
        durable: list[int] = []
        try:
            store = FileStreamStore(FileStoreConfig(DIRECTORY, segment_bytes=900), ops=fs)
            committer = GroupCommitter(store)
            for round_number in range(6):
                tickets = [committer.submit([(f"s.{round_number}", b"", b"m%d" % i, i)]) for i in range(3)]
                job = committer.next_job(0.0)
                assert job is not None
                late = committer.submit([("late", b"", b"l", 0)])  # arrives while the fsync runs
                job.run()
                done = committer.complete(job)
                assert [t.seqs for t in done] == [t.seqs for t in tickets]
                assert not late.durable
                follow = committer.next_job(0.0)
                assert follow is not None
                follow.run()
                assert committer.complete(follow) == [late]
                durable.extend(s for t in tickets + [late] for s in t.seqs)
        except SimulatedCrash:
            pass
        if not fs.crashed:
            assert committer.fsyncs == 12
            break
        for mode in MODES:
            recovered = FileStreamStore(FileStoreConfig(DIRECTORY, limits=limits), ops=fs.after_crash(mode))
            present = {m.seq for m in recovered.scan()}
            assert set(durable) <= present, f"crash at {crash_at} ({mode}) lost an acknowledged write"
            assert present == set(range(1, len(present) + 1)), "recovered writes are a prefix"
        crash_at += 1


def test_sync_interval_acknowledges_at_once_and_syncs_when_due() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig(DIRECTORY, sync_always=False), ops=fs)
    committer = GroupCommitter(store, sync_always=False, sync_interval_s=120.0, now_s=0.0)
    ticket = committer.submit([("a", b"", b"1", 1)])
    assert ticket.durable
    assert committer.next_job(60.0) is None
    assert {m.seq for m in FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs.after_crash("lose")).scan()} == set()
    job = committer.next_job(120.0)
    assert job is not None
    job.run()
    committer.complete(job)
    assert {m.seq for m in FileStreamStore(FileStoreConfig(DIRECTORY), ops=fs.after_crash("lose")).scan()} == {1}
