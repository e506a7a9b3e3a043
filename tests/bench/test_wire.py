"""The bench's full inbound parser and frame builders (client side of the NATS protocol)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.bench import wire
from appliance.errors import ProtocolError


def parse(data: bytes) -> wire.Event | None:
    event, _ = wire.parse_one(data, 0, len(data))
    return event


def test_every_server_operation_is_understood() -> None:
    assert parse(b"PING\r\n") == wire.Ping()
    assert parse(b"pong\n") == wire.Pong()  # case-insensitive, bare LF accepted (as nats-server)
    assert parse(b"+OK\r\n") == wire.Ok()
    assert parse(b"-ERR 'Authorization Violation'\r\n") == wire.Err("Authorization Violation")
    assert parse(b'INFO {"server_id":"N","headers":true} \r\n') == wire.Info({"server_id": "N", "headers": True})
    assert parse(b"MSG foo 9 5\r\nhello\r\n") == wire.Msg(b"foo", b"9", None, None, b"hello")
    assert parse(b"MSG\tfoo 9  rep 0\r\n\r\n") == wire.Msg(b"foo", b"9", b"rep", None, b"")


def test_headers_and_status_messages() -> None:
    msg = parse(b"HMSG foo 9 rep 18 23\r\nNATS/1.0\r\nA: b\r\n\r\nhello\r\n")
    assert msg == wire.Msg(b"foo", b"9", b"rep", b"NATS/1.0\r\nA: b\r\n\r\n", b"hello")
    assert isinstance(msg, wire.Msg) and msg.status is None
    no_responders = b"NATS/1.0 503\r\nNats-Subject: x\r\n\r\n"
    msg = parse(b"HMSG _INBOX.a 1 %d %d\r\n%s\r\n" % (len(no_responders), len(no_responders), no_responders))
    assert isinstance(msg, wire.Msg) and (msg.status, msg.description) == (503, "")
    timeout = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\n\r\n"
    msg = parse(b"HMSG i 1 %d %d\r\n%s\r\n" % (len(timeout), len(timeout), timeout))
    assert isinstance(msg, wire.Msg) and (msg.status, msg.description) == (408, "Request Timeout")


def test_incomplete_input_waits() -> None:
    for data in (b"", b"PIN", b"MSG foo 1 5\r\nhel", b"MSG foo 1 5\r\nhello\r"):
        assert wire.parse_one(data, 0, len(data)) == (None, 0)


@pytest.mark.parametrize("data", [
    b"BOGUS\r\n", b"MSG foo\r\n", b"MSG foo 1 x\r\n", b"MSG foo 1 5\r\nhello!!", b"HMSG a 1 9 5\r\n",
    b"INFO nope\r\n", b"INFO [1]\r\n", b"\r\n", b"MSG " + b"a" * 5000,
])
def test_malformed_input_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        wire.parse_one(data, 0, len(data))


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=120))
def test_garbage_raises_only_protocol_errors(data: bytes) -> None:
    reader = wire.Reader()
    reader.feed(data)
    try:
        list(reader.events())
    except ProtocolError:
        pass


def test_frame_builders() -> None:
    assert wire.pub(b"foo", b"hi") == b"PUB foo 2\r\nhi\r\n"
    assert wire.pub(b"foo", b"", b"_INBOX.1") == b"PUB foo _INBOX.1 0\r\n\r\n"
    assert wire.hpub(b"foo", {"Nats-Msg-Id": "1"}, b"hi", b"r") == \
        b"HPUB foo r 28 30\r\nNATS/1.0\r\nNats-Msg-Id: 1\r\n\r\nhi\r\n"
    assert wire.sub(b"foo", 3) == b"SUB foo 3\r\n"
    assert wire.sub(b"foo", 3, b"q") == b"SUB foo q 3\r\n"
    assert wire.unsub(3) == b"UNSUB 3\r\n"


def test_connect_line_is_what_real_clients_send() -> None:
    line = wire.connect_line(name="bench", user="u", password="p")
    assert line.startswith(b"CONNECT ") and line.endswith(b"\r\n")
    options = json.loads(line[8:])
    assert options["verbose"] is False and options["pedantic"] is False
    assert options["headers"] is True and options["no_responders"] is True and options["protocol"] == 1
    assert (options["user"], options["pass"], options["name"]) == ("u", "p", "bench")


def test_server_urls() -> None:
    from appliance.bench.conn import Endpoint

    assert Endpoint.parse("nats://127.0.0.1:4333") == Endpoint("127.0.0.1", 4333)
    assert Endpoint.parse("localhost") == Endpoint("localhost", 4222)
    assert Endpoint.parse("nats://u:p@h:1,nats://other:2") == Endpoint("h", 1, "u", "p")
    assert Endpoint.parse("nats://s3cret@h:1") == Endpoint("h", 1, token="s3cret")
