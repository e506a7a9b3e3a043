"""The hot-path frame scanner: the C loop and its Python twin agree, and counts never depend on
how the bytes were split into reads."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.bench import _scan_py, wire
from appliance.bench.scan import (
    FLAG_OUT_ACK,
    FLAG_OUT_ECHO,
    FLAG_STOP_ERROR,
    FLAG_STOP_STATUS,
    STOP_ERROR,
    STOP_NEED_MORE,
    STOP_OTHER,
    STOP_STATUS,
    _loadgen,
)

SCANNERS = [pytest.param(_scan_py.scan, id="python")]
if _loadgen is not None:
    SCANNERS.append(pytest.param(_loadgen.scan, id="C"))
flag_sets = st.integers(min_value=0, max_value=15)

tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_$", min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=4).map(".".join)
payloads = st.binary(max_size=64)


@st.composite
def server_ops(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["msg", "msg", "hmsg", "status", "error-ack", "ping", "pong", "ok", "err", "info"]))
    subject = draw(subjects).encode()
    sid = str(draw(st.integers(min_value=1, max_value=999))).encode()
    reply = draw(st.one_of(st.none(), subjects.map(str.encode)))
    middle = b"" if reply is None else reply + b" "
    if kind == "msg":
        payload = draw(payloads)
        return b"MSG %s %s %s%d\r\n%s\r\n" % (subject, sid, middle, len(payload), payload)
    if kind in ("hmsg", "status"):
        first = b"NATS/1.0 408 Request Timeout" if kind == "status" else b"NATS/1.0"
        headers = first + b"\r\nA: b\r\n\r\n"
        payload = b"" if kind == "status" else draw(payloads)
        return b"HMSG %s %s %s%d %d\r\n%s%s\r\n" % (subject, sid, middle, len(headers),
                                                   len(headers) + len(payload), headers, payload)
    if kind == "error-ack":
        payload = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}'
        return b"MSG %s %s %s%d\r\n%s\r\n" % (subject, sid, middle, len(payload), payload)
    return {"ping": b"PING\r\n", "pong": b"PONG\r\n", "ok": b"+OK\r\n", "err": b"-ERR 'Stale Connection'\r\n",
            "info": b'INFO {"server_id":"N1","max_payload":1048576} \r\n'}[kind]


streams = st.lists(server_ops(), max_size=12).map(b"".join)



@pytest.mark.skipif(_loadgen is None, reason="appliance.bench._loadgen is not built")
@settings(max_examples=40, deadline=None)
@given(data=st.one_of(streams, st.binary(max_size=200)), flags=flag_sets, cut=st.integers(min_value=0),
       start=st.integers(min_value=0))
def test_c_and_python_scan_return_the_same(data: bytes, flags: int, cut: int, start: int) -> None:
    assert _loadgen is not None
    end = cut % (len(data) + 1)
    begin = start % (end + 1)
    out_c, out_py = bytearray(b"x"), bytearray(b"x")
    assert _loadgen.scan(data, begin, end, flags, out_c) == _scan_py.scan(data, begin, end, flags, out_py)
    assert out_c == out_py


def drain(chunks: list[bytes], scan: object, flags: int) -> tuple[list[wire.Event], int, int, bytes]:
    """What a bench client does with reads: scan, hand the rest to the full parser; collect all."""
    assert callable(scan)
    buf, start, events, msgs, size, out = bytearray(), 0, [], 0, 0, bytearray()
    for chunk in chunks:
        buf += chunk
        while True:
            pos, count, nbytes, stop, _, _ = scan(buf, start, len(buf), flags, out)
            msgs, size, start = msgs + count, size + nbytes, pos
            if stop == STOP_NEED_MORE:
                break
            event, start = wire.parse_one(buf, start, len(buf))
            assert event is not None
            events.append(event)
    assert start == len(buf)
    return events, msgs, size, bytes(out)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@pytest.mark.parametrize("scan", SCANNERS)
@settings(max_examples=40, deadline=None)
@given(data=streams, cuts=st.lists(st.integers(min_value=0), max_size=10), flags=flag_sets)
def test_counts_do_not_depend_on_how_bytes_arrive(scan: object, data: bytes, cuts: list[int], flags: int) -> None:
    assert drain(split_at(data, cuts), scan, flags) == drain([data], scan, flags)


@pytest.mark.parametrize("scan", SCANNERS)
@settings(max_examples=40, deadline=None)
@given(data=streams, flags=flag_sets)
def test_scanned_plus_parsed_is_what_the_full_parser_sees(scan: object, data: bytes, flags: int) -> None:
    events, msgs, size, _ = drain([data], scan, flags)
    reader = wire.Reader()
    reader.feed(data)
    everything = list(reader.events())
    all_msgs = [e for e in everything if isinstance(e, wire.Msg)]
    assert msgs + sum(isinstance(e, wire.Msg) for e in events) == len(all_msgs)
    assert [e for e in events if not isinstance(e, wire.Msg)] == [e for e in everything if not isinstance(e, wire.Msg)]
    def body_bytes(msgs: list[wire.Event]) -> int:
        return sum(len(m.payload) + len(m.headers or b"") for m in msgs if isinstance(m, wire.Msg))

    assert size == body_bytes(list(all_msgs)) - body_bytes(events)


@settings(max_examples=40, deadline=None)
@given(data=streams, cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_reader_events_do_not_depend_on_how_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    whole, pieces = wire.Reader(), wire.Reader()
    whole.feed(data)
    expected = list(whole.events())
    got: list[wire.Event] = []
    for chunk in split_at(data, cuts):
        pieces.feed(chunk)
        got.extend(pieces.events())
    assert got == expected


STATUS_HEADERS = b"NATS/1.0 404 No Messages\r\n\r\n"
STATUS_FRAME = b"HMSG in 2 %d %d\r\n%s\r\n" % (len(STATUS_HEADERS), len(STATUS_HEADERS), STATUS_HEADERS)
ERROR_ACK = b'{"error":{"code":503}}'
STREAM = (b"MSG a.b 1 2\r\nhi\r\n"
          b"MSG a.b 1 _INBOX.x.1 3\r\nabc\r\n"
          b"PING\r\n" + STATUS_FRAME + b"MSG acks 3 %d\r\n%s\r\n" % (len(ERROR_ACK), ERROR_ACK))


@pytest.mark.parametrize("scan", SCANNERS)
def test_scan_stops_at_anything_that_is_not_a_plain_message(scan: object) -> None:
    assert callable(scan)
    pos, msgs, size, stop, rs, re = scan(STREAM, 0, len(STREAM), 0, None)
    assert (msgs, size, stop, STREAM[pos:pos + 6]) == (2, 5, STOP_OTHER, b"PING\r\n")
    assert STREAM[rs:re] == b"_INBOX.x.1"
    after_ping = pos + 6
    assert scan(STREAM, after_ping, len(STREAM), 0, None)[1:4] == (2, len(STATUS_HEADERS) + len(ERROR_ACK),
                                                                 STOP_NEED_MORE)
    status = scan(STREAM, after_ping, len(STREAM), FLAG_STOP_STATUS, None)
    assert status[1:4] == (0, 0, STOP_STATUS)
    skip_status = status[0] + len(STATUS_FRAME)
    assert scan(STREAM, skip_status, len(STREAM), FLAG_STOP_ERROR, None)[1:4] == (0, 0, STOP_ERROR)


@pytest.mark.parametrize("scan", SCANNERS)
def test_scan_writes_acks_and_echoes_for_messages_with_a_reply(scan: object) -> None:
    assert callable(scan)
    data = b"MSG a 1 r.1 2\r\nhi\r\nMSG a 1 2\r\nno\r\nHMSG a 1 r.2 12 15\r\nNATS/1.0\r\n\r\nabc\r\n"
    acks, echoes = bytearray(), bytearray()
    assert scan(data, 0, len(data), FLAG_OUT_ACK, acks)[1] == 3
    assert acks == b"PUB r.1 0\r\n\r\nPUB r.2 0\r\n\r\n"
    scan(data, 0, len(data), FLAG_OUT_ECHO, echoes)
    assert echoes == b"PUB r.1 2\r\nhi\r\nPUB r.2 3\r\nabc\r\n"
    with pytest.raises(TypeError):
        scan(data, 0, len(data), FLAG_OUT_ACK, None)
    with pytest.raises(ValueError):
        scan(data, 5, 2, 0, None)


@pytest.mark.parametrize("scan", SCANNERS)
def test_scan_waits_for_a_whole_frame(scan: object) -> None:
    assert callable(scan)
    frame = b"MSG a 1 5\r\nhello\r\n"
    for end in range(len(frame)):
        assert scan(frame, 0, end, 0, None)[:4] == (0, 0, 0, STOP_NEED_MORE)
    assert scan(frame, 0, len(frame), 0, None)[:4] == (len(frame), 1, 5, STOP_NEED_MORE)
    assert scan(b"MSG a 1 5\r\nhello!!", 0, 18, 0, None)[3] == STOP_OTHER  # no CRLF after the payload
    long_line = b"MSG " + b"a" * 5000
    assert scan(long_line, 0, len(long_line), 0, None)[3] == STOP_OTHER
