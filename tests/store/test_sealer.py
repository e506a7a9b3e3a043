"""BackgroundSealer: closed segments are compressed off the append path and installed on the owner's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SEAL_TMP_SUFFIX, ActiveSegment, SealedSegment
from appliance.store.sealer import BackgroundSealer
from appliance.testing.faultfs import FaultFS

CONFIG = FileStoreConfig("/sealer", segment_bytes=800)


class ManualExecutor(concurrent.futures.Executor):
    """Jobs wait until the test runs them: the 'thread' is as slow or as fast as the test says."""

    def __init__(self) -> None:
        self.queued: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.queued.append((lambda: fn(*args, **kwargs), future))
        return future

    def run_next(self) -> None:
        fn, future = self.queued.popleft()
        try:
            future.set_result(fn())
        except Exception as exc:  # noqa: BLE001 - handed to the future, as a thread pool does
            future.set_exception(exc)


class Owner:
    """The owner's loop: callbacks the sealer posts wait here until the owner runs them."""

    def __init__(self) -> None:
        self.posted: deque[Callable[[], None]] = deque()

    def run_posted(self) -> int:
        count = 0
        while self.posted:
            self.posted.popleft()()
            count += 1
        return count


def fill(store: FileStreamStore, start: int, count: int) -> dict[int, bytes]:
    payloads = {}
    for i in range(start, start + count):
        payload = b"payload-%04d" % i * 4
        payloads[store.store_msg(f"s.{i % 3}", b"", payload, i)] = payload
    return payloads


def kinds(store: FileStreamStore) -> list[str]:
    return ["sealed" if isinstance(s, SealedSegment) else "open" for s in store.segments()]


def drain(owner: Owner, executor: ManualExecutor) -> None:
    while executor.queued or owner.posted:
        if executor.queued:
            executor.run_next()
        owner.run_posted()


def test_closed_segments_are_sealed_on_the_sealer_and_installed_by_the_owner() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    store = FileStreamStore(CONFIG, ops=FaultFS(), sealer=sealer)
    payloads = fill(store, 0, 12)
    assert kinds(store)[0] == "open" and len(executor.queued) == 1, "one job in flight, nothing sealed inline"
    executor.run_next()
    assert kinds(store)[0] == "open", "the result waits for the owner's thread"
    payloads |= fill(store, 12, 3)  # appends go on meanwhile
    assert owner.run_posted() == 1
    assert kinds(store)[0] == "sealed" and sealer.sealed == 1
    drain(owner, executor)
    assert set(kinds(store)[:-1]) == {"sealed"}
    assert not sealer.busy
    assert {m.seq: m.payload for m in store.scan()} == payloads
    assert not [n for n in store.ops.list_dir("/sealer") if n.endswith(".tmp")]


def test_one_job_at_a_time_across_stores_in_request_order() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FaultFS()
    first = FileStreamStore(FileStoreConfig("/a", segment_bytes=800), ops=fs, sealer=sealer)
    second = FileStreamStore(FileStoreConfig("/b", segment_bytes=800), ops=fs, sealer=sealer)
    fill(first, 0, 12)
    fill(second, 0, 12)
    assert len(executor.queued) == 1
    drain(owner, executor)
    assert kinds(first)[0] == kinds(second)[0] == "sealed"
    assert sealer.sealed == sum(k == "sealed" for k in kinds(first) + kinds(second))


def test_an_owner_that_falls_behind_seals_inline_past_the_backlog_limit() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    store = FileStreamStore(CONFIG, ops=FaultFS(), sealer=sealer)
    payloads = fill(store, 0, 200)  # the sealer's one job never runs
    unsealed = sum(1 for s in store.segments()[:-1] if isinstance(s, ActiveSegment))
    assert unsealed <= limits.STORE_UNSEALED_SEGMENTS_MAX + 1
    assert "sealed" in kinds(store)
    drain(owner, executor)  # the stale job is discarded: its segment was sealed inline meanwhile
    assert {m.seq: m.payload for m in store.scan()} == payloads
    assert not [n for n in store.ops.list_dir("/sealer") if n.endswith(".tmp")]


class FailingSealWrites(FaultFS):
    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    def create(self, path: str, data: bytes) -> None:
        if self.failing and path.endswith(SEAL_TMP_SUFFIX):
            raise OSError(errno.ENOSPC, "no space left for the sealed copy")
        super().create(path, data)


def test_a_seal_that_fails_off_thread_leaves_the_segment_readable_and_is_retried_after_a_roll() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FailingSealWrites()
    store = FileStreamStore(CONFIG, ops=fs, sealer=sealer)
    payloads = fill(store, 0, 12)
    drain(owner, executor)
    assert sealer.failed == 1 and not store.broken
    assert kinds(store)[0] == "open"
    assert {m.seq: m.payload for m in store.scan()} == payloads
    fs.failing = False
    payloads |= fill(store, 12, 12)  # the next roll asks again
    drain(owner, executor)
    assert set(kinds(store)[:-1]) == {"sealed"}
    assert {m.seq: m.payload for m in store.scan()} == payloads


def test_a_store_closed_during_its_seal_keeps_its_segment_and_reopens_clean() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FaultFS()
    store = FileStreamStore(CONFIG, ops=fs, sealer=sealer)
    payloads = fill(store, 0, 12)
    executor.run_next()  # done off-thread; the owner has not installed it
    store.close()
    owner.run_posted()  # arrives after the close: ignored
    assert any(n.endswith(SEAL_TMP_SUFFIX) for n in fs.list_dir("/sealer"))
    reopened = FileStreamStore(CONFIG, ops=fs)  # no sealer: seals inline on open
    assert reopened.recovery.tmp_files_removed == 1
    assert {m.seq: m.payload for m in reopened.scan()} == payloads
    assert set(kinds(reopened)[:-1]) == {"sealed"}


def test_a_reopened_store_asks_its_sealer_for_segments_left_unsealed() -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig("/sealer", segment_bytes=800, seal_inline=False), ops=fs)
    payloads = fill(store, 0, 20)
    store.close()
    owner, executor = Owner(), ManualExecutor()
    reopened = FileStreamStore(CONFIG, ops=fs, sealer=BackgroundSealer(owner.posted.append, executor=executor))
    assert "open" in kinds(reopened)[:-1] and executor.queued
    drain(owner, executor)
    assert set(kinds(reopened)[:-1]) == {"sealed"}
    assert {m.seq: m.payload for m in reopened.scan()} == payloads


def test_on_a_real_thread_with_an_asyncio_owner(tmp_path: Path) -> None:
    async def main() -> tuple[dict[int, bytes], dict[int, bytes], list[str]]:
        sealer = BackgroundSealer(asyncio.get_running_loop().call_soon_threadsafe)
        store = FileStreamStore(FileStoreConfig(str(tmp_path / "s"), segment_bytes=4096), sealer=sealer)
        try:
            payloads = fill(store, 0, 400)
            deadline = time.monotonic() + 30
            while (sealer.busy or store.has_unsealed()) and time.monotonic() < deadline:
                await asyncio.sleep(0.005)  # the loop runs the sealer's completions meanwhile
            return payloads, {m.seq: m.payload for m in store.scan()}, kinds(store)
        finally:
            store.close()
            sealer.close()

    payloads, read, seen = asyncio.run(main())
    assert read == payloads
    assert len(seen) > 3 and set(seen[:-1]) == {"sealed"}


class FailingInstall(FaultFS):
    def rename(self, source: str, target: str) -> None:
        if source.startswith("/a/") and source.endswith(SEAL_TMP_SUFFIX):
            raise OSError(errno.EIO, "rename failed")
        super().rename(source, target)


def test_a_failed_install_breaks_only_that_store_and_the_sealer_goes_on() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FailingInstall()
    first = FileStreamStore(FileStoreConfig("/a", segment_bytes=800), ops=fs, sealer=sealer)
    second = FileStreamStore(FileStoreConfig("/b", segment_bytes=800), ops=fs, sealer=sealer)
    fill(first, 0, 12)
    payloads = fill(second, 0, 12)
    drain(owner, executor)
    assert first.broken and not second.broken
    assert kinds(second)[0] == "sealed"
    assert {m.seq: m.payload for m in second.scan()} == payloads


def test_backpressure_seals_are_counted() -> None:
    owner, executor = Owner(), ManualExecutor()
    store = FileStreamStore(CONFIG, ops=FaultFS(), sealer=BackgroundSealer(owner.posted.append, executor=executor))
    fill(store, 0, 12)
    assert store.backpressure_seals == 0
    fill(store, 12, 200)
    assert store.backpressure_seals > 0


def test_a_closed_segment_damaged_before_its_seal_is_never_sealed_around_the_damage() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FaultFS()
    store = FileStreamStore(CONFIG, ops=fs, sealer=sealer)
    fill(store, 0, 12)
    damaged = store.segments()[0].path
    fs.flip_bit(damaged, 8 * (fs.size(damaged) - 3))  # inside the last record's payload
    drain(owner, executor)
    assert sealer.failed == 1 and not store.broken
    assert kinds(store)[0] == "open"
    fill(store, 12, 12)  # later rolls seal the others, never this one
    drain(owner, executor)
    assert kinds(store)[0] == "open" and kinds(store)[1] == "sealed"
    assert not store.has_unsealed()


class FailingTrainingRead(FaultFS):
    """Reading a closed segment to train a dictionary fails (only /a uses a dictionary)."""

    def read_all(self, path: str) -> bytes:
        if path.startswith("/a/") and path.endswith(".seg"):
            raise OSError(errno.EIO, "read failed")
        return super().read_all(path)


def test_a_store_that_breaks_starting_its_seal_does_not_fail_another_stores_append() -> None:
    owner, executor = Owner(), ManualExecutor()
    sealer = BackgroundSealer(owner.posted.append, executor=executor)
    fs = FailingTrainingRead()
    busy = FileStreamStore(FileStoreConfig("/c", segment_bytes=800), ops=fs, sealer=sealer)
    fill(busy, 0, 12)  # holds the sealer's one job: the others wait in line
    broken = FileStreamStore(FileStoreConfig("/a", segment_bytes=800, use_dictionary=True), ops=fs, sealer=sealer)
    fill(broken, 0, 12)
    healthy = FileStreamStore(FileStoreConfig("/b", segment_bytes=800), ops=fs, sealer=sealer)
    payloads = fill(healthy, 0, 12)
    drain(owner, executor)  # /a's turn comes while /b waits behind it
    assert broken.broken and not healthy.broken
    payloads |= fill(healthy, 12, 12)
    drain(owner, executor)
    assert set(kinds(healthy)[:-1]) == {"sealed"}
    assert {m.seq: m.payload for m in healthy.scan()} == payloads
