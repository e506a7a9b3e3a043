"""Fail closed: after a failed fsync nothing more is acknowledged, and a reopen recovers the truth.

A failed fsync may have dropped the dirty pages (Linux does), so a store that kept going could
later report writes durable that never were. Every fsync of a workload is made to fail in turn.
"""

from __future__ import annotations

import pytest

from appliance.errors import BrokenError
from appliance.store.api import StoreLimitError, StoreLimits
from appliance.store.commit import GroupCommitter
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.testing.faultfs import FaultFS

CONFIG = FileStoreConfig("/eio", segment_bytes=600)


def test_every_failed_fsync_breaks_the_store_and_loses_no_acknowledged_write() -> None:
    failures = 0
    for call in range(200):
        fs = FaultFS(fail_fsync_at=call)
        acked: dict[int, bytes] = {}
        try:
            store = FileStreamStore(CONFIG, ops=fs)
        except BrokenError:
            continue  # the failure hit recovery itself: nothing was acknowledged
        broke = False
        for i in range(30):
            payload = b"message-%03d" % i
            try:
                acked[store.store_msg("s.%d" % (i % 3), b"", payload, i)] = payload
                if i % 7 == 6:
                    store.delete(min(acked))
                    del acked[min(acked)]
            except BrokenError:
                broke = True
                break
        if not broke:
            continue
        failures += 1
        assert store.broken
        with pytest.raises(BrokenError):
            store.store_msg("after", b"", b"x", 0)
        with pytest.raises(BrokenError):
            store.sync()
        recovered = FileStreamStore(CONFIG, ops=fs.after_crash("lose"))
        present = {m.seq: m.payload for m in recovered.scan()}
        assert {seq: present.get(seq) for seq in acked} == acked, f"fsync failure at call {call}"
    assert failures > 10


def test_a_failed_group_commit_fails_every_waiting_ticket() -> None:
    store = FileStreamStore(FileStoreConfig("/eio"), ops=FaultFS())
    committer = GroupCommitter(store)
    tickets = [committer.submit([("a", b"", b"%d" % i, i)]) for i in range(3)]
    job = committer.next_job(0.0)
    assert job is not None
    failed = committer.fail(job, OSError(5, "EIO"))
    assert failed == tickets and not any(t.durable for t in tickets)
    assert store.broken
    with pytest.raises(BrokenError):
        committer.submit([("a", b"", b"late", 9)])


@pytest.mark.parametrize("limits", [StoreLimits(), StoreLimits(max_msgs=100)], ids=["fast-path", "limits-path"])
def test_a_message_the_format_cannot_hold_is_refused_and_nothing_is_written(limits: StoreLimits) -> None:
    fs = FaultFS()
    store = FileStreamStore(FileStoreConfig("/big", limits=limits), ops=fs)
    store.store_msg("ok", b"", b"1", 1)
    size_before = fs.size(store.segments()[-1].path)
    with pytest.raises(StoreLimitError, match="message size exceeds maximum allowed"):
        store.store_batch([("ok", b"", b"2", 2), ("s" * 70_000, b"", b"x", 3)])
    if limits.max_msgs < 0:  # the native path checks the whole batch before writing any of it
        assert fs.size(store.segments()[-1].path) == size_before
    assert not store.broken
    assert store.store_msg("ok", b"", b"3", 4) == store.state().last_seq
    reopened = FileStreamStore(FileStoreConfig("/big", limits=limits), ops=fs)
    assert [m.payload for m in reopened.scan()] == [m.payload for m in store.scan()]
