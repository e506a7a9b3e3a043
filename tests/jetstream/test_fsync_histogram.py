"""The fsync latency / group-commit batch histograms /metrics shows (appliance/store/sync_stats.py)."""

from __future__ import annotations

from pathlib import Path

from appliance.store.sync_stats import Histogram, SyncStats


def test_observations_land_in_the_first_bucket_whose_bound_they_do_not_exceed() -> None:
    histogram = Histogram((0.001, 0.01))
    for value in (0.0005, 0.001, 0.002, 0.5):
        histogram.observe(value)
    snapshot = histogram.snapshot()
    assert snapshot.counts == (2, 1, 1)
    assert snapshot.count == 4
    assert abs(snapshot.total - 0.5035) < 1e-9


def test_inline_and_threaded_fsyncs_are_both_recorded(tmp_path: Path) -> None:
    from appliance.store.api import StoreLimits
    from appliance.store.filestore import FileStoreConfig, FileStreamStore

    stats = SyncStats()
    store = FileStreamStore(FileStoreConfig(directory=str(tmp_path), limits=StoreLimits(), sync_always=False),
                            sync_stats=stats)
    store.append_batch([("a", b"", b"1", 1), ("a", b"", b"2", 2), ("a", b"", b"3", 3)])
    store.sync()  # inline: three messages in one fsync
    store.append_batch([("a", b"", b"4", 4)])
    job = store.begin_sync()
    assert job is not None
    job.run()  # what a fsync thread does
    store.finish_sync(job)
    batches = stats.batch.snapshot()
    store.close()
    assert (batches.count, batches.total) == (2, 4.0)
    assert batches.counts[:3] == (1, 0, 1)  # a batch of 1 (le 1.0), one of 3 (le 4.0)
    assert stats.latency.snapshot().count >= 2
