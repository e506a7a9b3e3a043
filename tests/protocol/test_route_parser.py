"""The route parser: the writer's lines parse back to what was written, events never depend on how
the bytes arrive, and garbage raises only ProtocolError (with the -ERR text to send)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import ProtocolError
from appliance.protocol import _scan_py
from appliance.protocol.route_parser import (
    R_CONNECT,
    R_ERR,
    R_INFO,
    R_MSG,
    R_PING,
    R_PONG,
    R_RUN,
    R_SUB,
    R_UNSUB,
    RouteParser,
    append_rmsg,
    rs_minus,
    rs_plus,
    scan_rmsgs,
)

MAX_LINE = 4096
MAX_PAYLOAD = 1024


def expanded(events: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Runs of plain messages (R_RUN) as the R_MSG events they stand for."""
    flat: list[tuple[object, ...]] = []
    for event in events:
        if event[0] == R_RUN:
            flat += [(R_MSG, event[1], subject, reply, (), None, data) for _, subject, reply, data in event[2]]  # type: ignore[attr-defined]
        else:
            flat.append(event)
    return flat


def parse_all(chunks: list[bytes]) -> tuple[list[tuple[object, ...]], str | None]:
    parser = RouteParser(max_control_line=MAX_LINE, max_payload=MAX_PAYLOAD)
    events: list[tuple[object, ...]] = []
    for chunk in chunks:
        try:
            parser.feed(chunk, events)
        except ProtocolError as exc:
            return expanded(events), exc.client_error
    return expanded(events), None


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


tokens = st.sampled_from([b"foo", b"bar", b"a1", b"_INBOX", b"x-y", b"$JS"])
subjects = st.lists(tokens, min_size=1, max_size=4).map(lambda t: b".".join(t))
patterns = st.lists(st.one_of(tokens, st.just(b"*")), min_size=1, max_size=3).map(
    lambda t: b".".join(t)) | subjects.map(lambda s: s + b".>")
accounts = st.sampled_from([b"$G", b"$SYS", b"APP"])
queue_names = st.sampled_from([b"q1", b"workers", b"_sys_"])


@st.composite
def operations(draw: st.DrawFn) -> tuple[bytes, tuple[object, ...]]:
    """One operation as the writer (or Go) puts it on the wire, and the event it must parse to."""
    kind = draw(st.sampled_from(["sub", "subq", "unsub", "unsubq", "msg", "ping", "pong", "info", "connect",
                                 "err"]))
    account = draw(accounts)
    if kind == "sub":
        subject = draw(patterns)
        return rs_plus(account, subject), (R_SUB, account, subject, None, 0)
    if kind == "subq":
        subject, queue, weight = draw(patterns), draw(queue_names), draw(st.integers(1, 1000))
        return rs_plus(account, subject, queue, weight), (R_SUB, account, subject, queue, weight)
    if kind == "unsub":
        subject = draw(patterns)
        return rs_minus(account, subject), (R_UNSUB, account, subject, None)
    if kind == "unsubq":
        subject, queue = draw(patterns), draw(queue_names)
        return rs_minus(account, subject, queue), (R_UNSUB, account, subject, queue)
    if kind == "msg":
        subject = draw(subjects)
        reply = draw(st.none() | subjects)
        queues = tuple(draw(st.lists(queue_names, max_size=3, unique=True)))
        payload = draw(st.binary(max_size=64))
        header = draw(st.none() | st.just(b"NATS/1.0\r\nA: b\r\n\r\n"))
        data = payload if header is None else header + payload
        out = bytearray()
        append_rmsg(out, account, subject, reply, queues, -1 if header is None else len(header), data)
        return bytes(out), (R_MSG, account, subject, reply, queues, header, data)
    if kind == "ping":
        return b"PING\r\n", (R_PING,)
    if kind == "pong":
        return b"PONG\r\n", (R_PONG,)
    if kind == "info":
        return b'INFO {"server_id":"X"}\r\n', (R_INFO, b'{"server_id":"X"}')
    if kind == "connect":
        return b'CONNECT {"cluster":"C1"}\r\n', (R_CONNECT, b'{"cluster":"C1"}')
    return b"-ERR 'Authorization Violation'\r\n", (R_ERR, b"Authorization Violation")


@settings(max_examples=300, deadline=None)
@given(st.lists(operations(), max_size=12), st.lists(st.integers(0, 10_000), max_size=8))
def test_written_operations_parse_back_whatever_the_split(ops: list[tuple[bytes, tuple[object, ...]]],
                                                          cuts: list[int]) -> None:
    stream = b"".join(wire for wire, _ in ops)
    expected = [event for _, event in ops]
    assert parse_all([stream]) == (expected, None)
    assert parse_all(split_at(stream, cuts)) == (expected, None)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 1000), max_size=5))
def test_garbage_raises_only_protocol_error_and_split_does_not_matter(data: bytes, cuts: list[int]) -> None:
    whole = parse_all([data])
    assert parse_all(split_at(data, cuts)) == whole
    if whole[1] is not None:
        assert isinstance(whole[1], str)


@pytest.mark.parametrize("line, event", [
    (b"RMSG $G foo 2\r\nhi\r\n", (R_MSG, b"$G", b"foo", None, (), None, b"hi")),
    (b"RMSG $G foo _INBOX.1 2\r\nhi\r\n", (R_MSG, b"$G", b"foo", b"_INBOX.1", (), None, b"hi")),
    (b"RMSG $G foo + _INBOX.1 q1 q2 2\r\nhi\r\n", (R_MSG, b"$G", b"foo", b"_INBOX.1", (b"q1", b"q2"), None, b"hi")),
    (b"RMSG $G foo | q1 2\r\nhi\r\n", (R_MSG, b"$G", b"foo", None, (b"q1",), None, b"hi")),
    (b"HMSG $SYS $JS.API.INFO _R_.yvrkEW.OSL5FL 12 12\r\nNATS/1.0\r\n\r\n\r\n",
     (R_MSG, b"$SYS", b"$JS.API.INFO", b"_R_.yvrkEW.OSL5FL", (), b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\n\r\n")),
    (b"rs+ $G foo.* q 3\n", (R_SUB, b"$G", b"foo.*", b"q", 3)),
    (b"RS-\t$G foo q\r\n", (R_UNSUB, b"$G", b"foo", b"q")),
])
def test_go_forms(line: bytes, event: tuple[object, ...]) -> None:
    assert parse_all([line]) == ([event], None)


@pytest.mark.parametrize("line, error", [
    (b"PUB foo 2\r\nhi\r\n", "Unknown Protocol Operation"),
    (b"RS+ $G foo q 0\r\n", "processing RS+ arguments: 'RS+ $G foo q 0'"),
    (b"RS+ $G foo q\r\n", "processing RS+ arguments: 'RS+ $G foo q'"),
    (b"RMSG $G foo x\r\n", "processing RMSG arguments: 'RMSG $G foo x'"),
    (b"HMSG $G foo 5 2\r\nhi\r\n", "processing HMSG arguments: 'HMSG $G foo 5 2'"),
    (b"RMSG $G foo 2000\r\n", "Maximum Payload Violation"),
    (b"RMSG $G foo 2\r\nhiXX", "Unknown Protocol Operation"),
    (b"LS+ C1 $G foo\r\n", "Unknown Protocol Operation"),
    (b"X" * (MAX_LINE + 10), "maximum control line exceeded"),
])
def test_errors(line: bytes, error: str) -> None:
    assert parse_all([line])[1] == error


def test_plain_messages_of_one_account_come_as_one_run_of_pub_events() -> None:
    parser = RouteParser(max_control_line=MAX_LINE, max_payload=MAX_PAYLOAD)
    events: list[tuple[object, ...]] = []
    parser.feed(b"RMSG $G a 1\r\n1\r\nRMSG $G b r 1\r\n2\r\nRMSG $G a | q 1\r\n3\r\nRMSG $G a 1\r\n4\r\n"
                b"RMSG APP a 1\r\n5\r\nRMSG $G x $JS.ACK.S.C.1.1.1.1.0@orders.1 1\r\n6\r\n", events)
    assert [e[0] for e in events] == [R_RUN, R_MSG, R_RUN, R_RUN, R_MSG]
    assert events[0] == (R_RUN, b"$G", [(1, b"a", None, b"1"), (1, b"b", b"r", b"2")])


@settings(max_examples=400, deadline=None)
@given(st.lists(operations(), max_size=10), st.binary(max_size=20), st.integers(0, 40),
       st.sampled_from([b"", b"RMSG $G a\t1 1\r\nx\r\n", b"RMSG $G a + 1\r\nx\r\n", b"RMSG $G a b@c 1\r\nx\r\n",
                        b"RMSG $G  a 1\r\nx\r\n", b"RMSG $G a 9\r\nx\r\n", b"rmsg $G a 1\r\nx\r\n"]))
def test_native_and_python_rmsg_scanners_agree(ops: list[tuple[bytes, tuple[object, ...]]], tail: bytes,
                                               cut: int, odd: bytes) -> None:
    stream = b"".join(wire for wire, _ in ops) + odd + tail
    stream = stream[: len(stream) - cut] if cut < len(stream) else stream
    results = []
    for scan in {scan_rmsgs, _scan_py.scan_rmsgs}:
        out: list[tuple[object, ...]] = [(R_RUN, b"$G", [])]
        pos = scan(stream, 0, MAX_LINE, MAX_PAYLOAD, out)
        results.append((pos, out))
    assert all(result == results[0] for result in results)
