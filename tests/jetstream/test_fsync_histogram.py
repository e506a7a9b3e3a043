"""The fsync latency histogram /metrics shows: fixed buckets, le semantics (a value on a bound counts in it)."""

from __future__ import annotations

from appliance.jetstream.fsync import FsyncHistogram


def test_observations_land_in_the_first_bucket_whose_bound_they_do_not_exceed() -> None:
    histogram = FsyncHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.5):
        histogram.observe(seconds)
    snapshot = histogram.snapshot()
    assert snapshot.counts == (2, 1, 1)
    assert snapshot.count == 4
    assert abs(snapshot.total_s - 0.5035) < 1e-9
