"""The sync publish path (one publisher waiting for each PubAck): its fsync runs on the loop, the
PubAck leaves right after that fsync and never before it, a failed fsync answers nobody, and the
store underneath is preallocated (fileops.py) without changing what is stored."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance import limits
from appliance.clock import ManualClock
from appliance.errors import BrokenError
from appliance.jetstream.config import parse_stream_config
from appliance.jetstream.stream import Stream, store_limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SyncJob


class _NoTimer:
    def cancel(self) -> None:
        pass


class ScriptedHost:
    """A Host whose loop turns and fsync-thread jobs run only when the test says so."""

    server_name = "S1"
    domain = ""
    sync_interval_s = 120.0
    sync_always = True

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.rng = random.Random(7)
        self.soon: list[Callable[[], None]] = []
        self.jobs: list[tuple[SyncJob, Callable[[OSError | None], None]]] = []
        self.sent: list[tuple[bytes, bytes]] = []
        self.now = 1_000

    def now_ns(self) -> int:
        self.now += 1
        return self.now

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        self.sent.extend(messages)

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> _NoTimer:
        return _NoTimer()

    def run_sync_job(self, job: SyncJob, done: Callable[[OSError | None], None]) -> None:
        self.jobs.append((job, done))

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for fn in soon:
            fn()

    def settle(self) -> None:
        """Run loop turns until none is scheduled (a proposal applies on the turn after it)."""
        for _ in range(100):
            if not self.soon:
                return
            self.turn()
        raise AssertionError("the loop never went idle")


def open_stream(tmp_path: Path, host: ScriptedHost) -> Stream:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
    store = FileStreamStore(
        FileStoreConfig(directory=str(tmp_path / "msgs"), limits=store_limits(config), sync_always=False)
    )
    return Stream(
        config=config, created_ns=1, store=store, host=host,  # type: ignore[arg-type]
        peer="p1", group_id="S-t",
    )


class FlushRecordingHost(ScriptedHost):
    """Remembers, for every PubAck batch, whether it asked to be written to the sockets at once
    and how many fdatasyncs had completed before it."""

    def __init__(self, fsyncs: list[int]) -> None:
        super().__init__()
        self.fsyncs = fsyncs
        self.batches: list[tuple[list[tuple[bytes, bytes]], bool, int]] = []

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        self.batches.append((list(messages), flush_now, len(self.fsyncs)))
        super().publish_many(messages, flush_now=flush_now)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    done: list[int] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        real(fd)
        done.append(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    return done


@pytest.fixture
def host(fsyncs: list[int]) -> FlushRecordingHost:
    return FlushRecordingHost(fsyncs)


@pytest.fixture
def stream(tmp_path: Path, host: FlushRecordingHost) -> Iterator[Stream]:
    stream = open_stream(tmp_path, host)
    yield stream
    stream.close()


def test_a_lone_publish_is_fsynced_on_the_loop_and_answered_at_once(
    stream: Stream, host: FlushRecordingHost, fsyncs: list[int]
) -> None:
    for seq in range(1, 4):
        before = len(fsyncs)
        stream.publish_raw("s.a", b"_INBOX.sync", b"", b"payload")
        host.settle()
        assert host.jobs == []  # no fsync thread involved
        messages, flush_now, fsyncs_then = host.batches[-1]
        assert messages == [(b"_INBOX.sync", b'{"stream":"S","seq":%d}' % seq)]
        assert flush_now  # written to the publisher's socket now, not at the end of the loop turn
        assert fsyncs_then == before + 1  # exactly one fsync, and it came before the PubAck


def test_up_to_the_inline_limit_waiting_acks_share_one_fsync_on_the_loop(
    stream: Stream, host: FlushRecordingHost, fsyncs: list[int]
) -> None:
    before = len(fsyncs)  # the new store synced its first segment when it was created
    for index in range(limits.JS_INLINE_FSYNC_ACKS_MAX):
        stream.publish_raw("s.a", b"r%d" % index, b"", b"x")
    host.settle()
    assert host.jobs == [] and len(fsyncs) == before + 1
    assert [reply for reply, _ in host.sent] == [b"r%d" % i for i in range(limits.JS_INLINE_FSYNC_ACKS_MAX)]


def test_a_failed_inline_fsync_answers_nobody_and_breaks_the_store(
    stream: Stream, host: FlushRecordingHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream.publish_raw("s.a", b"ok", b"", b"first")
    host.settle()
    assert [reply for reply, _ in host.sent] == [b"ok"]

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    stream.publish_raw("s.a", b"lost", b"", b"second")
    host.settle()
    assert [reply for reply, _ in host.sent] == [b"ok"]  # the unsynced message is never acknowledged
    store = stream.store
    assert isinstance(store, FileStreamStore) and store.broken


def test_publishes_on_a_preallocated_segment_read_back_and_survive_a_reopen(
    tmp_path: Path, host: FlushRecordingHost
) -> None:
    stream = open_stream(tmp_path, host)
    for index in range(20):
        stream.publish_raw("s.a", b"r", b"", b"m%d" % index)
        host.settle()
    segment = sorted((tmp_path / "msgs").glob("*.seg"))[-1]
    written = stream.store.segments()[-1].size  # type: ignore[attr-defined]
    assert segment.stat().st_size > written  # the appends landed in space allocated ahead
    loaded = [stream.store.load(seq) for seq in range(1, 21)]
    assert [m.payload for m in loaded if m is not None] == [b"m%d" % i for i in range(20)]
    stream.close()
    reopened = open_stream(tmp_path, ScriptedHost())
    try:
        assert reopened.store.state().msgs == 20
        assert [m.payload for m in reopened.store.scan(1)] == [b"m%d" % i for i in range(20)]
    finally:
        reopened.close()


def test_an_fsync_that_succeeds_after_another_one_failed_releases_nothing(
    stream: Stream, host: FlushRecordingHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(limits.JS_INLINE_FSYNC_ACKS_MAX + 4):  # enough acks for an off-loop fsync
        stream.publish_raw("s.a", b"r%d" % index, b"", b"x")
    host.settle()
    assert len(host.jobs) == 1 and host.sent == []
    store = stream.store
    assert isinstance(store, FileStreamStore)

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    assert store.delete(1)  # a DELETE's removal record, then its sync on the loop fails
    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", failing)
        with pytest.raises(BrokenError):
            store.sync()
    job, done = host.jobs.pop()
    job.run()  # the off-loop fsync itself reports success: the error went to the other caller
    done(None)
    assert host.sent == []  # nothing it covered is acknowledged
