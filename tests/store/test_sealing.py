"""Background sealing: closed segments are served unsealed until the owner's seal job lands."""

from __future__ import annotations

from appliance import limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import ActiveSegment, SealedSegment
from appliance.testing.faultfs import FaultFS

CONFIG = FileStoreConfig("/bg", segment_bytes=800, seal_inline=False)


def fill(store: FileStreamStore, count: int) -> dict[int, bytes]:
    return {store.store_msg("s", b"", b"payload-%04d" % i * 4, i): b"payload-%04d" % i * 4 for i in range(count)}


def kinds(store: FileStreamStore) -> list[str]:
    return ["sealed" if isinstance(s, SealedSegment) else "open" for s in store.segments()]


def test_closed_segments_wait_for_the_owner_and_are_read_meanwhile() -> None:
    store = FileStreamStore(CONFIG, ops=FaultFS())
    payloads = fill(store, 20)
    assert kinds(store)[:2] == ["open", "open"]
    assert {m.seq: m.payload for m in store.scan()} == payloads
    job = store.begin_seal()
    assert job is not None
    store.store_msg("s", b"", b"written while the job runs", 99)
    job.run()
    assert store.finish_seal(job)
    assert kinds(store)[0] == "sealed"
    assert {m.seq: m.payload for m in store.scan()} == {**payloads, 21: b"written while the job runs"}


def test_a_seal_of_a_segment_rewritten_meanwhile_is_discarded() -> None:
    store = FileStreamStore(CONFIG, ops=FaultFS())
    fill(store, 20)
    job = store.begin_seal()
    assert job is not None
    store.delete(2, erase=True)  # rewrites the closed segment the job was made from
    job.run()
    assert not store.finish_seal(job)
    assert store.load(2) is None
    again = store.begin_seal()
    assert again is not None
    again.run()
    assert store.finish_seal(again)
    assert b"payload-0001" not in store.ops.read_all(store.segments()[0].path)


def test_a_backlog_of_closed_segments_is_sealed_inline() -> None:
    store = FileStreamStore(CONFIG, ops=FaultFS())
    fill(store, 200)
    unsealed = sum(1 for s in store.segments()[:-1] if isinstance(s, ActiveSegment))
    assert unsealed <= limits.STORE_UNSEALED_SEGMENTS_MAX + 1
    assert "sealed" in kinds(store)


def test_a_backlog_is_sealed_at_the_fast_level_and_a_lone_segment_at_the_configured_one() -> None:
    store = FileStreamStore(CONFIG, ops=FaultFS())
    fill(store, 40)
    waiting = sum(1 for s in store.segments()[:-1] if isinstance(s, ActiveSegment))
    assert 1 < waiting <= limits.STORE_UNSEALED_SEGMENTS_MAX
    while (job := store.begin_seal()) is not None:
        job.run()
        assert store.finish_seal(job)
    assert store.fast_seals == waiting - 1, "every seal but the last had a backlog behind it"
    assert store.backpressure_seals == 0
