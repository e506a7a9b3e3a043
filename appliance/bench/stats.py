"""Statistics of a bench run: latency percentiles, bounded latency sampling, throughput, medians.

Percentiles use the nearest-rank definition: p-th percentile of n sorted samples is the sample of
rank ceil(p/100 * n) (1-based), p=0 gives the minimum. It always returns a value that was
measured, never an interpolation.

A LatencyRecorder keeps at most `capacity` samples: when more operations are expected it keeps
every k-th one (k fixed up front from the expected count), so memory is bounded and the sample
is spread evenly over the run. The maximum is tracked over every operation, sampled or not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from appliance.limits import BENCH_LATENCY_SAMPLES_MAX

Samples = npt.NDArray[np.int64]


def percentile_rank(q: float, n: int) -> int:
    """The 0-based index of the nearest-rank q-th percentile among n sorted samples."""
    assert n > 0
    assert 0.0 <= q <= 100.0
    return max(0, math.ceil(q / 100.0 * n) - 1)


def percentile(sorted_samples: Samples | Sequence[int], q: float) -> int:
    return int(sorted_samples[percentile_rank(q, len(sorted_samples))])


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Nanoseconds. `count` is how many operations were measured, `sampled` how many were kept."""

    count: int
    sampled: int
    p50_ns: int
    p90_ns: int
    p99_ns: int
    max_ns: int
    mean_ns: float

    def as_dict(self) -> dict[str, float]:
        return {"count": self.count, "sampled": self.sampled, "p50_us": self.p50_ns / 1e3,
                "p90_us": self.p90_ns / 1e3, "p99_us": self.p99_ns / 1e3, "max_us": self.max_ns / 1e3,
                "mean_us": self.mean_ns / 1e3}


def summarize(samples: Samples, *, count: int | None = None, max_ns: int | None = None) -> LatencySummary | None:
    """Summary of samples (any order); None when there are none."""
    if len(samples) == 0:
        return None
    ordered = np.sort(samples)
    top = int(ordered[-1]) if max_ns is None else max(max_ns, int(ordered[-1]))
    return LatencySummary(count=len(samples) if count is None else count, sampled=len(samples),
                          p50_ns=percentile(ordered, 50), p90_ns=percentile(ordered, 90),
                          p99_ns=percentile(ordered, 99), max_ns=top, mean_ns=float(ordered.mean()))


class LatencyRecorder:
    """Bounded latency samples for one client: every `stride`-th operation is kept."""

    def __init__(self, expected: int, *, capacity: int = BENCH_LATENCY_SAMPLES_MAX) -> None:
        assert capacity > 0
        self.stride = max(1, math.ceil(max(expected, 1) / capacity))
        self._samples = np.zeros(capacity, dtype=np.int64)
        self._kept = 0
        self.count = 0
        self.max_ns = 0

    def record(self, latency_ns: int) -> None:
        if self.count % self.stride == 0 and self._kept < len(self._samples):
            self._samples[self._kept] = latency_ns
            self._kept += 1
        self.count += 1
        self.max_ns = max(self.max_ns, latency_ns)

    def record_many(self, latencies_ns: Samples) -> None:
        """Record in order, as if record() were called for each."""
        n = len(latencies_ns)
        if n == 0:
            return
        first = (-self.count) % self.stride  # index of the first element whose count is a stride multiple
        chosen = latencies_ns[first :: self.stride]
        room = len(self._samples) - self._kept
        chosen = chosen[:room]
        self._samples[self._kept : self._kept + len(chosen)] = chosen
        self._kept += len(chosen)
        self.count += n
        self.max_ns = max(self.max_ns, int(latencies_ns.max()))

    @property
    def samples(self) -> Samples:
        return self._samples[: self._kept].copy()

    def summary(self) -> LatencySummary | None:
        return summarize(self._samples[: self._kept], count=self.count, max_ns=self.max_ns)


def merge_summary(parts: Sequence[tuple[Samples, int, int]]) -> LatencySummary | None:
    """Combine (samples, count, max_ns) of several clients into one summary."""
    non_empty = [p for p in parts if len(p[0])]
    if not non_empty:
        return None
    samples = np.concatenate([p[0] for p in non_empty])
    return summarize(samples, count=sum(p[1] for p in parts), max_ns=max(p[2] for p in parts))


@dataclass(frozen=True, slots=True)
class Rate:
    msgs: int
    bytes: int
    elapsed_s: float
    ended_s: float | None = None  # when the measured interval ended (one clock for every client)

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.elapsed_s / 1e6 if self.elapsed_s > 0 else 0.0


def aggregate(rates: Sequence[Rate]) -> Rate:
    """Clients run side by side: total work over the time from the earliest start to the latest end
    (as `nats bench` aggregates its samples); over the longest client's time when ends are unknown."""
    assert rates
    msgs, data_bytes = sum(r.msgs for r in rates), sum(r.bytes for r in rates)
    ends = [r.ended_s for r in rates]
    if any(end is None for end in ends):
        return Rate(msgs, data_bytes, max(r.elapsed_s for r in rates))
    last = max(end for end in ends if end is not None)
    first = min(r.ended_s - r.elapsed_s for r in rates if r.ended_s is not None)
    return Rate(msgs, data_bytes, last - first, last)


def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count)."""
    assert values
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
