"""The publish hot path of a stream, under a scripted host: PubAcks leave only after the fsync that
covers them, in publish order, byte-compatible with nats-server; a batch the stream proposed
itself is applied without decoding it again; errors are answered at once."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance import limits
from appliance.clock import ManualClock
from appliance.jetstream import ops
from appliance.jetstream.config import parse_stream_config
from appliance.jetstream.stream import Stream, store_limits
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.layout import SyncJob


class ScriptedHost:
    """A Host whose loop turns and fsync jobs run only when the test says so."""

    server_name = "S1"
    domain = ""
    sync_interval_s = 120.0

    def __init__(self, *, sync_always: bool = True) -> None:
        self.sync_always = sync_always
        self.clock = ManualClock()
        self.rng = random.Random(7)
        self.soon: list[Callable[[], None]] = []
        self.jobs: list[tuple[SyncJob, Callable[[OSError | None], None]]] = []
        self.sent: list[tuple[bytes, bytes]] = []
        self.now = 1_000

    def now_ns(self) -> int:
        self.now += 1
        return self.now

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None:
        self.sent.append((subject.encode(), payload))

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        self.sent.extend(messages)

    def deliver(self, match: str, subject: str, reply: str, header: bytes | None, payload: bytes) -> int:
        return 0

    def deliver_raw(
        self, key: bytes, subject_b: bytes, reply_b: bytes | None, header: bytes | None, payload: bytes
    ) -> int:
        return 0

    def has_interest(self, subject: str, queue: str = "") -> bool:
        return False

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

    def finish_fsyncs(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job, done in jobs:
            job.run()
            done(None)

    def fail_fsyncs(self) -> None:
        jobs, self.jobs = self.jobs, []
        for _job, done in jobs:
            done(OSError(5, "Input/output error"))


class _NoTimer:
    def cancel(self) -> None:
        pass


@pytest.fixture
def host() -> ScriptedHost:
    return ScriptedHost()


def open_stream(tmp_path: Path, host: ScriptedHost) -> Stream:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
    store = FileStreamStore(
        FileStoreConfig(directory=str(tmp_path / "msgs"), limits=store_limits(config), sync_always=False)
    )
    return Stream(config=config, created_ns=1, store=store, host=host, peer="p1", group_id="S-t")


@pytest.fixture
def stream(tmp_path: Path, host: ScriptedHost) -> Iterator[Stream]:
    stream = open_stream(tmp_path, host)
    yield stream
    stream.close()


def test_pubacks_wait_for_the_fsync_that_covers_them(stream: Stream, host: ScriptedHost) -> None:
    count = limits.JS_INLINE_FSYNC_ACKS_MAX + 8  # enough waiting acks for an off-loop fsync
    for index in range(count):
        stream.publish_raw("s.a", b"_INBOX.r.%d" % index, b"", b"x")
    host.settle()
    assert stream.store.state().msgs == count
    assert host.sent == [] and len(host.jobs) == 1  # written, not yet durable: nobody is answered
    host.finish_fsyncs()
    assert host.sent == [(b"_INBOX.r.%d" % i, b'{"stream":"S","seq":%d}' % (i + 1)) for i in range(count)]


def test_publishes_during_an_fsync_wait_for_the_next_one(stream: Stream, host: ScriptedHost) -> None:
    for index in range(10):
        stream.publish_raw("s.a", b"r1", b"", b"%d" % index)
    host.settle()
    for index in range(10):
        stream.publish_raw("s.b", b"r2", b"", b"%d" % index)
    host.settle()
    assert len(host.jobs) == 1  # one fsync in flight; the second batch waits for it
    host.finish_fsyncs()
    assert [reply for reply, _ in host.sent] == [b"r1"] * 10  # the first fsync covered the first batch
    host.finish_fsyncs()
    assert [reply for reply, _ in host.sent] == [b"r1"] * 10 + [b"r2"] * 10
    assert host.sent[-1][1] == b'{"stream":"S","seq":20}'


def test_the_leader_applies_its_own_batch_without_decoding_it(
    stream: Stream, host: ScriptedHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(data: bytes) -> list[ops.InMsg]:
        raise AssertionError("decoded a batch this stream proposed itself")

    monkeypatch.setattr(ops, "decode_msgs", refuse)
    stream.publish_raw("s.a", b"r", b"", b"one")
    stream.publish_raw("s.a", b"", b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n", b"two")
    host.settle()
    host.finish_fsyncs()
    stored = [stream.store.load(seq) for seq in (1, 2)]
    assert [(m.subject, m.payload) for m in stored if m is not None] == [("s.a", b"one"), ("s.a", b"two")]
    assert host.sent == [(b"r", b'{"stream":"S","seq":1}')]


def test_errors_and_duplicates_are_answered_as_nats_server(stream: Stream, host: ScriptedHost) -> None:
    header = b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n"
    stream.publish_raw("s.a", b"first", header, b"a")
    stream.publish_raw("s.a", b"again", header, b"a")
    stream.publish_raw("s.a", b"wrong", b"NATS/1.0\r\nNats-Expected-Stream: OTHER\r\n\r\n", b"b")
    host.settle()
    assert host.sent == []  # the batch is answered as a whole once the fsync covering it is done
    host.finish_fsyncs()
    assert host.sent == [
        (b"first", b'{"stream":"S","seq":1}'),
        (b"again", b'{"stream":"S","seq":1,"duplicate": true}'),
        (b"wrong", b'{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},'
                   b'"stream":"S","seq":0}'),
    ]
    assert stream.store.state().msgs == 1


def test_with_a_sync_interval_pubacks_leave_at_once(tmp_path: Path) -> None:
    host = ScriptedHost(sync_always=False)
    stream = open_stream(tmp_path, host)
    try:
        for _ in range(5):
            stream.publish_raw("s.a", b"r", b"", b"x")
        host.settle()
        assert host.jobs == [] and [body for _, body in host.sent][-1] == b'{"stream":"S","seq":5}'
    finally:
        stream.close()


def test_a_failed_fsync_acknowledges_nothing_it_covered(stream: Stream, host: ScriptedHost) -> None:
    for index in range(10):
        stream.publish_raw("s.a", b"r%d" % index, b"", b"x")
    host.settle()
    host.fail_fsyncs()
    assert host.sent == []
    store = stream.store
    assert isinstance(store, FileStreamStore) and store.broken  # every later write fails too


def test_the_stream_log_keeps_only_recent_batches_in_memory(stream: Stream, host: ScriptedHost) -> None:
    """Applied batches are in the store; the in-memory RAFT log must not hold every payload."""
    for _ in range(5 * limits.JS_STREAM_LOG_ENTRIES):
        stream.publish_raw("s.a", b"", b"", b"x" * 1024)
        host.settle()
    storage = stream.group.storage
    assert storage.last_index() - storage.first_index() < 2 * limits.JS_STREAM_LOG_ENTRIES
    assert stream.store.state().msgs == 5 * limits.JS_STREAM_LOG_ENTRIES
