"""Group-commit fsyncs off the event loop: a few threads take SyncJobs from one queue and post
each completion back to the loop.

Lighter than `loop.run_in_executor` on the PubAck path (no concurrent and asyncio futures per
commit): a job is a queue entry, its completion one `call_soon_threadsafe`. A failed fsync is
reported to `done` as the OSError; nothing it covered may be called durable.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.store.layout import SyncJob

logger = logging.getLogger(__name__)

Done = Callable[[OSError | None], None]
_STOP = None
# upper bounds (seconds) of the fsync latency histogram /metrics shows (appliance_jetstream_fsync_seconds)
FSYNC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # per bucket (not cumulative); one more than bounds: the +Inf bucket
    total_s: float
    count: int


class FsyncHistogram:
    """Fixed buckets, written by the fsync threads, read by the monitoring loop (a lock: a few ns per fsync)."""

    def __init__(self, bounds: tuple[float, ...] = FSYNC_BUCKETS_S) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._total_s = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self._total_s += seconds

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            return HistogramSnapshot(self.bounds, tuple(self._counts), self._total_s, sum(self._counts))


class FsyncThreads:
    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, *, name: str = "js-fsync") -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[tuple[SyncJob, Done] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{k}", daemon=True) for k in range(threads)
        ]
        self._stopped = False
        self.latency = FsyncHistogram()
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
            started = time.perf_counter()
            try:
                job.run()
            except OSError as exc:
                error = exc
            self.latency.observe(time.perf_counter() - started)
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
