"""Group-commit fsyncs off the event loop: a few threads take SyncJobs from one queue and post
each completion back to the loop.

Lighter than `loop.run_in_executor` on the PubAck path (no concurrent and asyncio futures per
commit): a job is a queue entry, its completion one `call_soon_threadsafe`. A failed fsync is
reported to `done` as the OSError; nothing it covered may be called durable.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable

from appliance.store.layout import SyncJob

logger = logging.getLogger(__name__)

Done = Callable[[OSError | None], None]
_STOP = None


class FsyncThreads:
    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, *, name: str = "js-fsync") -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[tuple[SyncJob, Done] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{k}", daemon=True) for k in range(threads)
        ]
        self._stopped = False
        for thread in self._threads:
            thread.start()

    def submit(self, job: SyncJob, done: Done) -> None:
        """Run job.run() on a thread, then done(None) — or done(error) — on the loop."""
        assert not self._stopped, "fsync threads stopped"
        self._jobs.put((job, done))

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            job, done = item
            error: OSError | None = None
            try:
                job.run()
            except OSError as exc:
                error = exc
            try:
                self._loop.call_soon_threadsafe(done, error)
            except RuntimeError:  # the loop closed meanwhile: nobody is waiting any more
                logger.debug("fsync finished after the loop closed")

    def stop(self) -> None:
        """Finish every job already submitted, then end the threads."""
        if self._stopped:
            return
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(_STOP)
        for thread in self._threads:
            thread.join()
