"""BackgroundSealer: compress closed segments off the owner's loop, on one thread.

A full active segment is closed (fsynced) on the append path; compressing it (zstd at a level
worth keeping for years) is too slow to do there. A store given a sealer asks it for a seal
when it closes a segment. The sealer keeps one SealJob in flight across every store of the
process (zstd releases the GIL, so one thread is one core's worth of compression), and hands the
finished job back to the owner's thread through `post` (asyncio's `loop.call_soon_threadsafe`),
where `finish_seal` renames the compressed file over the segment.

Backpressure: while jobs wait, closed segments are read as they are (uncompressed). A store whose
backlog passes STORE_UNSEALED_SEGMENTS_MAX seals inline on its own append path, so a writer that
outruns the sealer slows down instead of filling the disk with uncompressed segments.

The owner's thread calls request/forget/close; `_finished` runs on the executor's thread and only
posts. A seal that fails off-thread (an OSError writing the compressed file) leaves the segment
closed and readable; it is retried at the next request, never treated as a broken store.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance import limits
from appliance.errors import BrokenError, LimitExceeded
from appliance.store.layout import SealJob

if TYPE_CHECKING:
    from appliance.store.filestore import FileStreamStore

logger = logging.getLogger(__name__)

Post = Callable[[Callable[[], None]], None]


class BackgroundSealer:
    def __init__(self, post: Post, *, executor: concurrent.futures.Executor | None = None) -> None:
        self._post = post
        self._owns_executor = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=limits.STORE_SEAL_THREADS, thread_name_prefix="store-seal"
        )
        self._waiting: OrderedDict[int, FileStreamStore] = OrderedDict()  # by id(store), FIFO
        self._running: tuple[FileStreamStore, SealJob, concurrent.futures.Future[None]] | None = None
        self._closed = False
        self.sealed = 0  # segments installed
        self.failed = 0  # jobs that raised off-thread

    @property
    def busy(self) -> bool:
        return self._running is not None or bool(self._waiting)

    def request(self, store: FileStreamStore) -> None:
        """The store has closed segments to seal (owner's thread)."""
        if self._closed:
            return
        if id(store) not in self._waiting:
            if len(self._waiting) >= limits.STORE_SEAL_WAITING_MAX:
                raise LimitExceeded("STORE_SEAL_WAITING_MAX stores already wait for the sealer")
            self._waiting[id(store)] = store
        self._maybe_start()

    def forget(self, store: FileStreamStore) -> None:
        """The store closes: drop its request and wait for its job in flight (owner's thread)."""
        self._waiting.pop(id(store), None)
        running = self._running
        if running is not None and running[0] is store:
            concurrent.futures.wait([running[2]])

    def close(self) -> None:
        """No more seals; waits for the job in flight (its result is not installed)."""
        self._closed = True
        self._waiting.clear()
        running = self._running
        if running is not None:
            concurrent.futures.wait([running[2]])
        if self._owns_executor:
            self._executor.shutdown(wait=True)

    def _maybe_start(self) -> None:
        while self._running is None and self._waiting and not self._closed:
            _, store = self._waiting.popitem(last=False)
            if store.closed or store.broken:
                continue
            try:
                job = store.begin_seal()
            except BrokenError:  # that store's own failure: never raised into another store's append
                logger.error("store: could not start a seal of %s: the store is broken", store.config.directory)
                continue
            if job is None:
                continue
            future = self._executor.submit(job.run)
            self._running = (store, job, future)
            future.add_done_callback(self._finished)

    def _finished(self, future: concurrent.futures.Future[None]) -> None:
        """Executor thread (or the submitting thread, if already done): hand over to the owner."""
        try:
            self._post(lambda: self._install(future))
        except RuntimeError:  # the owner's loop is closed: the job is dropped, recovery cleans up
            logger.debug("store: seal finished after its owner stopped")

    def _install(self, future: concurrent.futures.Future[None]) -> None:
        running = self._running
        if running is None or running[2] is not future:
            return
        store, job, _ = running
        self._running = None
        try:
            self._install_into(store, job, future.exception())
        finally:
            self._maybe_start()  # whatever happened to this store, the others keep their turn

    def _install_into(self, store: FileStreamStore, job: SealJob, error: BaseException | None) -> None:
        if self._closed or store.closed or store.broken:
            return
        if error is not None:
            self.failed += 1
            store.seal_failed(job, error)
        else:
            try:
                installed = store.finish_seal(job)
            except BrokenError:  # the rename failed: the store is broken, its owner reopens it
                logger.error("store: installing the seal of %s broke the store", job.path)
                return
            self.sealed += installed
        if store.has_unsealed():
            self.request(store)
