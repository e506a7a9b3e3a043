"""Stream republish, pure: the config checks, the copy's subject and header bytes, and the stream
republishing what it stores (and nothing else) under a scripted host."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.clock import ManualClock
from appliance.jetstream.config import parse_stream_config
from appliance.jetstream.errors import JsApiError
from appliance.jetstream.republish import Republisher, compile_republish, parse_republish, settle_update
from appliance.jetstream.stream import Stream, store_limits
from appliance.jetstream.wire import build_headers, parse_headers
from appliance.store.memory import MemoryStreamStore


def _error(call: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(JsApiError) as info:
        call()
    return info.value.entry.err_code, info.value.description


def test_echo_defaults_the_source_and_keeps_headers_only() -> None:
    assert parse_republish({"dest": "rp.>"}, subjects=["a.>"], subject_transform=None) == {"src": ">", "dest": "rp.>"}
    echo = parse_republish({"src": "a.*", "dest": "rp.$1", "headers_only": True}, subjects=["a.>"], subject_transform=None)
    assert echo == {"src": "a.*", "dest": "rp.$1", "headers_only": True}
    assert parse_republish({}, subjects=["a.>"], subject_transform=None) == {"src": ">", "dest": ""}


@pytest.mark.parametrize(
    ("republish", "subjects", "text"),
    [
        ({"src": "a.>", "dest": "a.x.>"}, ["a.>"], "stream configuration for republish destination forms a cycle"),
        ({"dest": ">"}, ["a.>"], "stream configuration for republish destination forms a cycle"),
        ({"dest": "b.*"}, ["a.>", "b.c"], "stream configuration for republish destination forms a cycle"),
        ({"src": "a.>", "dest": "rp.*"}, ["a.>"],
         "stream configuration for republish with transform from 'a.>' to 'rp.*' not valid"),
        ({"src": "a.*", "dest": "rp.$2"}, ["a.>"],
         "stream configuration for republish with transform from 'a.*' to 'rp.$2' not valid"),
        ({"src": "a.>", "dest": "rp"}, ["a.>"],
         "stream configuration for republish with transform from 'a.>' to 'rp' not valid"),
        ({"src": "a..b", "dest": "rp"}, ["a.>"],
         "stream configuration for republish with transform from 'a..b' to 'rp' not valid"),
    ],
)
def test_refusals_carry_nats_server_texts(republish: dict[str, object], subjects: list[str], text: str) -> None:
    assert _error(lambda: parse_republish(republish, subjects=subjects, subject_transform=None)) == (10052, text)


def test_republish_from_the_config_request() -> None:
    config = parse_stream_config({"name": "S", "subjects": ["a.>"], "republish": {"dest": "rp.>"}})
    assert config.republish == {"src": ">", "dest": "rp.>"}
    assert config.to_json()["republish"] == {"src": ">", "dest": "rp.>"}
    # a stream with no subjects has its name as subject: a destination on it is a cycle
    assert _error(lambda: parse_stream_config({"name": "S", "republish": {"dest": "S"}}))[0] == 10052
    assert _error(lambda: parse_stream_config({"name": "S", "republish": {"src": 1}}))[0] == 10025


def test_implicit_republish_follows_the_subject_transform() -> None:
    config = parse_stream_config({
        "name": "S", "subjects": ["l"], "subject_transform": {"src": "l", "dest": "lt"},
        "republish": {"src": ">", "dest": ">"},
    })
    assert config.republish == {"src": "lt", "dest": "lt"}


def test_an_update_turns_an_empty_destination_into_everything() -> None:
    assert settle_update({"src": "c.>", "dest": ""}) == {"src": "c.>", "dest": ">"}
    assert _error(lambda: settle_update({"src": "s.*", "dest": ""})) == (
        10069, "stream configuration for republish from 's.*' to '>': invalid subject"
    )
    assert settle_update({"src": "c.>", "dest": "x.>"}) == {"src": "c.>", "dest": "x.>"}
    assert settle_update(None) is None


def test_target_is_none_for_unmatched_or_unpublishable_subjects() -> None:
    transform = compile_republish("g.*", "rp. x.$1")  # accepted: nats-server skips ValidateMapping here
    assert transform is not None
    republisher = Republisher("G", transform, headers_only=False)
    assert republisher.target("g.q") is None  # "rp. x.q" can not be published
    plain = Republisher("A", compile_republish("a.*", "rp.$1") or pytest.fail(), headers_only=False)
    assert plain.target("a.one") == b"rp.one"
    assert plain.target("a.one.two") is None
    assert compile_republish(">", "") is None  # an empty dest republishes nothing


def test_header_bytes_as_nats_server_writes_them() -> None:
    transform = compile_republish(">", "rp.>")
    assert transform is not None
    ts = 1_700_000_000_123_456_700
    plain = Republisher("A", transform, headers_only=False).header(b"", "a.one", 7, ts, 3, 5)
    assert plain == (
        b"NATS/1.0\r\nNats-Stream: A\r\nNats-Subject: a.one\r\nNats-Sequence: 7\r\n"
        b"Nats-Time-Stamp: 2023-11-14T22:13:20.1234567Z\r\nNats-Last-Sequence: 3\r\n\r\n"
    )
    only = Republisher("A", transform, headers_only=True).header(b"NATS/1.0\r\nX: 1\r\n\r\n", "a.one", 7, ts, 0, 5)
    assert only == (
        b"NATS/1.0\r\nX: 1\r\nNats-Stream: A\r\nNats-Subject: a.one\r\nNats-Sequence: 7\r\n"
        b"Nats-Time-Stamp: 2023-11-14T22:13:20.1234567Z\r\nNats-Last-Sequence: 0\r\nNats-Msg-Size: 5\r\n\r\n"
    )


def _lines(block: bytes) -> list[tuple[str, str]]:
    """Every header line of a block, in order (repeated keys kept)."""
    body = block.split(b"\r\n")[1:-2]
    return [(k.decode(), v.decode().strip()) for k, _, v in (line.partition(b":") for line in body)]


TOKEN = st.text(alphabet="abcdefXYZ-_0123456789", min_size=1, max_size=8)


@given(
    pairs=st.lists(st.tuples(TOKEN, TOKEN), max_size=5),
    seq=st.integers(1, 2**63),
    previous=st.integers(0, 2**63),
    size=st.integers(0, 2**31),
    headers_only=st.booleans(),
)
def test_the_copy_keeps_every_stored_header_and_adds_the_republish_ones(
    pairs: list[tuple[str, str]], seq: int, previous: int, size: int, headers_only: bool
) -> None:
    transform = compile_republish(">", "rp.>")
    assert transform is not None
    stored = build_headers(pairs) if pairs else b""
    block = Republisher("S", transform, headers_only=headers_only).header(stored, "a.b", seq, 10**18, previous, size)
    assert block.startswith(stored[:-2] if stored else b"NATS/1.0\r\n") and block.endswith(b"\r\n\r\n")
    parsed = _lines(block)
    added = [
        ("Nats-Stream", "S"), ("Nats-Subject", "a.b"), ("Nats-Sequence", str(seq)),
        ("Nats-Time-Stamp", "2001-09-09T01:46:40Z"), ("Nats-Last-Sequence", str(previous)),
    ] + ([("Nats-Msg-Size", str(size))] if headers_only else [])
    assert parsed == [*pairs, *added]


# --- the stream -----------------------------------------------------------------------------------


class Host:
    """A Host that runs loop turns when told to and records what is republished."""

    server_name = "S1"
    domain = ""
    sync_always = False
    sync_interval_s = 120.0

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.rng = random.Random(3)
        self.soon: list[Callable[[], None]] = []
        self.republished: list[tuple[bytes, bytes, bytes]] = []
        self.stream: Stream | None = None
        self.now = 1_000_000_000

    def now_ns(self) -> int:
        self.now += 1
        return self.now

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None:
        pass

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        pass

    def republish(self, subject: bytes, header: bytes, payload: bytes) -> None:
        self.republished.append((subject, header, payload))
        if self.stream is not None:  # as the router would: the copy reaches the stream's own subscription
            self.stream.publish_raw(subject.decode(), b"", header, payload)

    def has_interest(self, subject: str, queue: str = "") -> bool:
        return False

    def call_soon(self, fn: Callable[[], None]) -> None:
        self.soon.append(fn)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> _Timer:
        return _Timer()

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


class _Timer:
    def cancel(self) -> None:
        pass


@pytest.fixture
def host() -> Host:
    return Host()


def _stream(host: Host, *, own_subjects: bool = False, **overrides: object) -> Stream:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"], **overrides})
    if own_subjects:  # what an update with an empty dest gives: copies land on the stream's subjects
        config.republish = settle_update(config.republish)
    store = MemoryStreamStore(store_limits(config))
    stream = Stream(config=config, created_ns=1, store=store, host=host, peer="p1", group_id="S-t")  # type: ignore[arg-type]
    host.stream = stream
    return stream


@pytest.fixture
def stream(host: Host, tmp_path: Path) -> Iterator[Stream]:
    stream = _stream(host, own_subjects=True, republish={"dest": ""})
    assert stream.config.republish == {"src": ">", "dest": ">"}
    yield stream
    stream.close()


def _fields(header: bytes) -> dict[str, str]:
    return dict(parse_headers(header))


def test_each_stored_message_is_republished_once_with_the_previous_sequence_of_its_subject(
    stream: Stream, host: Host
) -> None:
    for subject in ("s.a", "s.b", "s.a"):
        stream.publish_raw(subject, b"", b"", b"data")
    host.settle()
    host.settle()  # had the copies been taken in, they would be stored now
    assert stream.store.state().msgs == 3  # the stream ignored its own copies
    got = [(s, _fields(h), p) for s, h, p in host.republished]
    assert [(s, f["Nats-Sequence"], f["Nats-Last-Sequence"], p) for s, f, p in got] == [
        (b"s.a", "1", "0", b"data"),
        (b"s.b", "2", "0", b"data"),
        (b"s.a", "3", "1", b"data"),
    ]


def test_duplicates_and_refused_messages_are_not_republished(stream: Stream, host: Host) -> None:
    msg_id = build_headers([("Nats-Msg-Id", "one")])
    stream.publish_raw("s.a", b"", msg_id, b"1")
    stream.publish_raw("s.a", b"", msg_id, b"1")  # duplicate
    stream.publish_raw("s.a", b"", build_headers([("Nats-Expected-Last-Sequence", "9")]), b"2")  # refused
    host.settle()
    assert len(host.republished) == 1
    fields = _fields(host.republished[0][1])
    assert fields["Nats-Msg-Id"] == "one" and fields["Nats-Sequence"] == "1"


def test_interest_stream_republishes_nothing_nobody_wants(host: Host) -> None:
    stream = _stream(host, retention="interest", republish={"dest": "rp.>"})
    stream.publish_raw("s.a", b"", b"", b"x")
    host.settle()
    assert host.republished == [] and stream.store.state().msgs == 0
    stream.close()


def test_update_changes_the_republish_of_a_live_stream(stream: Stream, host: Host) -> None:
    config = parse_stream_config({"name": "S", "subjects": ["s.>"], "republish": {"dest": "rp.>", "headers_only": True}})
    stream.update_config(config)
    stream.publish_raw("s.a", b"", b"", b"12345")
    host.settle()
    config = parse_stream_config({"name": "S", "subjects": ["s.>"]})
    stream.update_config(config)
    stream.publish_raw("s.a", b"", b"", b"after")
    host.settle()
    assert [(s, _fields(h)["Nats-Msg-Size"], p) for s, h, p in host.republished] == [(b"rp.s.a", "5", b"")]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({}, ["0", "0", "1", "3", "2"]),
        ({"max_msgs_per_subject": 1}, ["0", "0", "1", "3", "2"]),  # the previous one is still there
        ({"max_msgs": 1}, ["0", "0", "0", "3", "0"]),  # a newer message of another subject removed it
        ({"max_msgs": 1, "discard": "new"}, ["0"]),  # the rest are refused
    ],
)
def test_a_run_of_publishes_names_the_previous_message_of_each_subject(
    host: Host, limits: dict[str, object], expected: list[str]
) -> None:
    stream = _stream(host, republish={"dest": "rp.>"}, **limits)
    for subject in ("s.a", "s.b", "s.a", "s.a", "s.b"):
        stream.publish_raw(subject, b"", b"", b"x")
    host.settle()  # one run of five header-less messages
    assert [_fields(h)["Nats-Last-Sequence"] for _, h, _ in host.republished] == expected
    stream.close()
