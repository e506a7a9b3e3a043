"""Bench statistics: nearest-rank percentiles against a naive oracle, bounded sampling, rates."""

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.bench.stats import (
    LatencyRecorder,
    Rate,
    aggregate,
    median,
    merge_summary,
    percentile,
    percentile_rank,
    summarize,
)

latencies = st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=300)
quantiles = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


def naive_percentile(values: list[int], q: float) -> int:
    """The smallest sample v such that at least q% of the samples are <= v (q=0: the minimum)."""
    for v in sorted(values):
        if sum(1 for x in values if x <= v) * 100.0 >= q * len(values):
            return v
    raise AssertionError("unreachable")


@settings(max_examples=50, deadline=None)
@given(values=latencies, q=quantiles)
def test_percentile_matches_the_naive_definition(values: list[int], q: float) -> None:
    assert percentile(np.sort(np.array(values, dtype=np.int64)), q) == naive_percentile(values, q)


@settings(max_examples=50, deadline=None)
@given(values=latencies, q=quantiles)
def test_a_percentile_is_always_a_measured_value(values: list[int], q: float) -> None:
    assert percentile(sorted(values), q) in values


def test_percentile_ranks_of_a_hundred_samples() -> None:
    assert [percentile_rank(q, 100) for q in (0, 1, 50, 90, 99, 100)] == [0, 0, 49, 89, 98, 99]
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([7], 50) == 7


@settings(max_examples=50, deadline=None)
@given(values=latencies)
def test_summary_orders_its_percentiles(values: list[int]) -> None:
    summary = summarize(np.array(values, dtype=np.int64))
    assert summary is not None
    assert min(values) <= summary.p50_ns <= summary.p90_ns <= summary.p99_ns <= summary.max_ns == max(values)
    assert summary.count == summary.sampled == len(values)
    assert summary.mean_ns == pytest.approx(statistics.fmean(values))


def test_summary_of_nothing_is_none() -> None:
    assert summarize(np.zeros(0, dtype=np.int64)) is None
    assert LatencyRecorder(10).summary() is None


def test_recorder_keeps_everything_below_capacity() -> None:
    recorder = LatencyRecorder(5, capacity=8)
    for v in (5, 1, 4, 2, 3):
        recorder.record(v)
    assert list(recorder.samples) == [5, 1, 4, 2, 3]
    assert recorder.count == 5
    assert recorder.max_ns == 5


def test_recorder_keeps_every_kth_sample_when_more_are_expected() -> None:
    recorder = LatencyRecorder(1000, capacity=100)
    for v in range(1000):
        recorder.record(v)
    assert recorder.stride == 10
    assert list(recorder.samples) == list(range(0, 1000, 10))
    assert recorder.count == 1000
    assert recorder.max_ns == 999  # the maximum is exact even when its sample was not kept


def test_recorder_never_grows_past_its_capacity() -> None:
    recorder = LatencyRecorder(10, capacity=4)  # more operations than expected
    for v in range(50):
        recorder.record(v)
    recorder.record_many(np.arange(50, dtype=np.int64))
    assert len(recorder.samples) == 4
    assert recorder.count == 100


@settings(max_examples=50, deadline=None)
@given(chunks=st.lists(st.lists(st.integers(min_value=0, max_value=10**9), max_size=40), max_size=12),
       expected=st.integers(min_value=1, max_value=400), capacity=st.integers(min_value=1, max_value=64))
def test_record_many_is_the_same_as_recording_one_by_one(chunks: list[list[int]], expected: int,
                                                          capacity: int) -> None:
    one_by_one = LatencyRecorder(expected, capacity=capacity)
    batched = LatencyRecorder(expected, capacity=capacity)
    for chunk in chunks:
        for v in chunk:
            one_by_one.record(v)
        batched.record_many(np.array(chunk, dtype=np.int64))
    assert list(batched.samples) == list(one_by_one.samples)
    assert (batched.count, batched.max_ns) == (one_by_one.count, one_by_one.max_ns)


def test_merged_summary_covers_every_client() -> None:
    a = (np.array([1, 2, 3], dtype=np.int64), 3, 3)
    b = (np.array([10, 20], dtype=np.int64), 20, 50)  # sampled: 20 operations, max 50 not in samples
    merged = merge_summary([a, b, (np.zeros(0, dtype=np.int64), 0, 0)])
    assert merged is not None
    assert (merged.count, merged.sampled, merged.max_ns, merged.p50_ns) == (23, 5, 50, 3)
    assert merge_summary([(np.zeros(0, dtype=np.int64), 0, 0)]) is None


def test_rates_and_their_aggregate() -> None:
    rate = Rate(msgs=1000, bytes=128_000, elapsed_s=0.5)
    assert (rate.msgs_per_s, rate.mb_per_s) == (2000.0, 0.256)
    assert Rate(0, 0, 0.0).msgs_per_s == 0.0
    total = aggregate([Rate(100, 10, 1.0), Rate(300, 30, 2.0)])
    assert (total.msgs, total.bytes, total.elapsed_s) == (400, 40, 2.0)


def test_an_aggregate_spans_the_earliest_start_to_the_latest_end_like_nats_bench() -> None:
    # a publisher measured over [10, 12] and a subscriber from its first message to its last, [10.5, 12.5]
    publisher = Rate(msgs=1000, bytes=0, elapsed_s=2.0, ended_s=12.0)
    subscriber = Rate(msgs=1000, bytes=0, elapsed_s=2.0, ended_s=12.5)
    total = aggregate([publisher, subscriber])
    assert (total.msgs, total.elapsed_s, total.ended_s, total.msgs_per_s) == (2000, 2.5, 12.5, 800.0)
    # one end unknown: the longest client's time, as before
    assert aggregate([publisher, Rate(1000, 0, 2.0)]).elapsed_s == 2.0


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=50))
def test_median_matches_the_standard_library(values: list[float]) -> None:
    assert median(values) == pytest.approx(statistics.median(values))
