"""How the store's fsyncs go: latency and group-commit batch size, as fixed-bucket histograms.

One SyncStats is shared by every file store of a JetStream service (so a deleted stream takes
nothing away: the histograms only grow, as Prometheus wants), fed on the owner's loop: by
`FileStreamStore.sync()` (an fsync run inline) and `finish_sync()` (an fsync a thread ran, timed by
SyncJob.run). /metrics shows them as appliance_jetstream_fsync_seconds and
appliance_jetstream_group_commit_messages.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # per bucket (not cumulative); one more than bounds: the +Inf bucket
    total: float  # the sum of the observed values
    count: int


class Histogram:
    """Fixed upper bounds; a value on a bound counts in that bucket (Prometheus' `le`)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        assert list(bounds) == sorted(bounds)
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._total += value

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self._counts), self._total, sum(self._counts))


@dataclass(slots=True)
class SyncStats:
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    batch: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))

    def record(self, seconds: float, messages: int) -> None:
        """One fsync; one that made no message durable (a directory's, at open or close) is no batch."""
        self.latency.observe(seconds)
        if messages > 0:
            self.batch.observe(float(messages))
