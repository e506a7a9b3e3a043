"""The client parser: events never depend on how bytes arrive; garbage raises only ProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import native
from appliance.errors import ProtocolError
from appliance.protocol import _scan_py
from appliance.protocol.client_parser import (
    OP_CONNECT,
    OP_HPUB,
    OP_PING,
    OP_PONG,
    OP_PUB,
    OP_SUB,
    OP_UNSUB,
    ClientParser,
)

MAX_LINE = 4096
MAX_PAYLOAD = 1024


def parse_all(chunks: list[bytes]) -> tuple[list[tuple[object, ...]], str | None]:
    parser = ClientParser(max_control_line=MAX_LINE, max_payload=MAX_PAYLOAD)
    events: list[tuple[object, ...]] = []
    for chunk in chunks:
        try:
            parser.feed(chunk, events)
        except ProtocolError as exc:
            return events, exc.client_error
    return events, None


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


subjects = st.lists(st.sampled_from([b"foo", b"bar", b"a1", b"*", b">", b"_INBOX", b"x-y"]), min_size=1,
                    max_size=4).map(lambda t: b".".join(t))
payloads = st.binary(max_size=64)


@st.composite
def operations(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["pub", "pubr", "hpub", "sub", "subq", "unsub", "unsubmax", "ping", "pong",
                                 "connect", "lower"]))
    subject = draw(subjects)
    payload = draw(payloads)
    if kind == "pub":
        return b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload)
    if kind == "pubr":
        return b"PUB %s _INBOX.r %d\r\n%s\r\n" % (subject, len(payload), payload)
    if kind == "hpub":
        header = b"NATS/1.0\r\nA: b\r\n\r\n"
        return b"HPUB %s %d %d\r\n%s%s\r\n" % (subject, len(header), len(header) + len(payload), header, payload)
    if kind == "sub":
        return b"SUB %s 1\r\n" % subject
    if kind == "subq":
        return b"SUB %s q 2\r\n" % subject
    if kind == "unsub":
        return b"UNSUB 1\r\n"
    if kind == "unsubmax":
        return b"UNSUB 2 5\r\n"
    if kind == "ping":
        return b"PING\r\n"
    if kind == "pong":
        return b"PONG\r\n"
    if kind == "lower":
        return b"pub\t%s %d\n%s\r\n" % (subject, len(payload), payload)
    return b'CONNECT {"verbose":false}\r\n'


streams = st.lists(operations(), max_size=20).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=streams, cuts=st.lists(st.integers(min_value=0), max_size=16))
def test_events_do_not_depend_on_how_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    assert parse_all(split_at(data, cuts)) == parse_all([data])


@settings(max_examples=200, deadline=None)
@given(data=streams)
def test_one_byte_at_a_time(data: bytes) -> None:
    assert parse_all([data[i : i + 1] for i in range(len(data))]) == parse_all([data])


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_garbage_raises_only_protocol_errors(data: bytes, cuts: list[int]) -> None:
    whole = parse_all([data])
    assert parse_all(split_at(data, cuts)) == whole


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(streams, st.binary(max_size=200)), pos=st.integers(min_value=0, max_value=40))
def test_native_and_python_scanners_agree(data: bytes, pos: int) -> None:
    if not native.ENABLED:
        pytest.skip("native module disabled (APPLIANCE_NO_NATIVE=1)")
    pos = min(pos, len(data))
    out_c: list[object] = []
    out_py: list[object] = []
    assert native.speedups.scan_pubs(data, pos, MAX_LINE, MAX_PAYLOAD, out_c) == _scan_py.scan_pubs(
        data, pos, MAX_LINE, MAX_PAYLOAD, out_py)
    assert out_c == out_py


def test_event_shapes() -> None:
    data = (b'CONNECT {"a":1}\r\nPUB foo 5\r\nhello\r\nPUB foo r 0\r\n\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n'
            b"SUB foo.* 7\r\nSUB foo q 8\r\nUNSUB 7\r\nUNSUB 8 3\r\nPING\r\nPONG\r\n")
    events, error = parse_all([data])
    assert error is None
    assert events == [
        (OP_CONNECT, b'{"a":1}'),
        (OP_PUB, b"foo", None, b"hello"),
        (OP_PUB, b"foo", b"r", b""),
        (OP_HPUB, b"h", None, b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\n\r\nhi"),
        (OP_SUB, b"foo.*", None, b"7"),
        (OP_SUB, b"foo", b"q", b"8"),
        (OP_UNSUB, b"7", None),
        (OP_UNSUB, b"8", 3),
        (OP_PING,),
        (OP_PONG,),
    ]


# What nats-server 2.15.1 answered to each input (observed on the wire): the -ERR text, or "" when it
# closes without one, or None when the connection stays open.
NATS_SERVER_ANSWERS = [
    (b"PUB foo\r\n", ""),
    (b"PUB foo 3\r\nabcd\r\n", "Unknown Protocol Operation"),
    (b"PUB foo 3\r\nab\r\n\r\n", "Unknown Protocol Operation"),
    (b"pub foo 2\r\nhi\r\nPING\r\n", None),
    (b"PUB foo bar baz 2\r\nhi\r\n", ""),
    (b"SUB foo\r\n", ""),
    (b"SUB foo bar baz qux\r\n", ""),
    (b"UNSUB\r\n", "Unknown Protocol Operation"),
    (b"UNSUB 1 x\r\nPING\r\n", None),
    (b"FOO\r\n", "Unknown Protocol Operation"),
    (b"PUB foo -1\r\n", ""),
    (b"PUB foo x\r\n", ""),
    (b"PUB foo 2\nhi\nPING\n", "Unknown Protocol Operation"),
    (b"HPUB foo 2 1\r\n", ""),
    (b"PING x\r\n", None),
    (b"MSG foo 1 2\r\nhi\r\n", "Unknown Protocol Operation"),
    (b"+OK\r\n", None),
    (b"-ERR 'x'\r\n", ""),
    (b"INFO {}\r\nPING\r\n", None),
    (b"P\r\n", "Unknown Protocol Operation"),
    (b"PUBX foo 2\r\n", "Unknown Protocol Operation"),
    (b"PUB\tfoo\t2\r\nhi\r\n", None),
    (b"PUB foo 00002\r\nhi\r\n", None),
    (b"PUB foo +2\r\nhi\r\n", ""),
    (b"\r\nPING\r\n", "Unknown Protocol Operation"),
    (b" PING\r\n", "Unknown Protocol Operation"),
    (b"PINGX\r\n", None),
    (b"HPUB foo 3 2\r\nab\r\n", ""),
    (b"CONNECT\r\n", ""),
    (b"PUB foo 2000\r\n", "Maximum Payload Violation"),
    (b"SUB " + b"a" * 5000 + b" 1\r\n", "maximum control line exceeded"),
    (b"SUB " + b"a" * 5000, "maximum control line exceeded"),
]


@pytest.mark.parametrize(("data", "expected"), NATS_SERVER_ANSWERS)
def test_errors_as_nats_server(data: bytes, expected: str | None) -> None:
    _, error = parse_all([data])
    assert error == expected


@settings(max_examples=300, deadline=None)
@given(subject=subjects, sid=st.binary(min_size=1, max_size=6).filter(lambda b: b" " not in b),
       reply=st.one_of(st.none(), subjects), header_size=st.integers(min_value=-1, max_value=8), data=payloads)
def test_native_and_python_msg_writers_agree(subject: bytes, sid: bytes, reply: bytes | None, header_size: int,
                                             data: bytes) -> None:
    from appliance.protocol import wire
    if not native.ENABLED:
        pytest.skip("native module disabled (APPLIANCE_NO_NATIVE=1)")
    header_size = min(header_size, len(data))
    tail = b" " + sid + b" "
    out_c, out_py = bytearray(b"prefix"), bytearray(b"prefix")
    native.speedups.append_msg(out_c, subject, tail, reply, header_size, data)
    wire.append_msg(out_py, subject, tail, reply, header_size, data)
    assert out_c == out_py
