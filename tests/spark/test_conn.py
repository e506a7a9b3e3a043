"""The Spark tasks' NATS client parses MSG/HMSG frames however the bytes are cut (property test),
answers server PINGs, and reports -ERR with the server's words."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.spark import conn as conn_module
from appliance.spark.conn import Auth, Connection, NatsError, parse_url
from tests.spark.fake_socket import FakeSocket


def connect_over(monkeypatch: pytest.MonkeyPatch, stream: bytes, cuts: list[int]) -> tuple[Connection, FakeSocket]:
    data = b'INFO {"max_payload":1048576}\r\nPONG\r\n' + stream
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    fake = FakeSocket([data[a:b] for a, b in zip(points, points[1:]) if b > a])
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: fake)
    return Connection("nats://127.0.0.1:4222"), fake


FRAMES = st.lists(
    st.tuples(st.sampled_from(["a.b", "_INBOX.x.1", "z"]), st.sampled_from(["", "reply.1"]),
              st.binary(max_size=40), st.booleans()),
    min_size=1, max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(frames=FRAMES, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_frames_survive_any_cutting(frames: list[tuple[str, str, bytes, bool]], cuts: list[int]) -> None:
    wire = b"PING\r\n"  # answered while the first frame is awaited
    for subject, reply, payload, with_headers in frames:
        reply_part = f" {reply}" if reply else ""
        if with_headers:
            headers = b"NATS/1.0\r\nK: v\r\n\r\n"
            wire += f"HMSG {subject} 1{reply_part} {len(headers)} {len(headers) + len(payload)}\r\n".encode()
            wire += headers + payload + b"\r\n"
        else:
            wire += f"MSG {subject} 1{reply_part} {len(payload)}\r\n".encode() + payload + b"\r\n"
    with pytest.MonkeyPatch.context() as patch:
        conn, fake = connect_over(patch, wire, cuts)
        got = [conn.next_frame(5) for _ in frames]
    assert [(f.subject, f.reply, f.payload, bool(f.headers)) for f in got] == frames
    assert b"PONG\r\n" in fake.sent


def test_err_raises_with_the_server_text(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"INFO {}\r\n-ERR 'Authorization Violation'\r\n"
    fake = FakeSocket([data])
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: fake)
    with pytest.raises(NatsError, match="^Authorization Violation$"):
        Connection("nats://127.0.0.1:1")
    assert b'"headers": true' in fake.sent


def test_urls() -> None:
    assert parse_url("nats://u:p%40ss@h:5", Auth()) == ("h", 5, Auth("u", "p@ss"), False)
    assert parse_url("nats://tok@h", Auth()) == ("h", 4222, Auth(token="tok"), False)
    assert parse_url("h:7", Auth(token="x")) == ("h", 7, Auth(token="x"), False)
    assert parse_url("tls://u:p@h:1", Auth()) == ("h", 1, Auth("u", "p"), True)
    seeded = Auth(nkey_seed="SU...")
    assert parse_url("nats://u:p@h", seeded) == ("h", 4222, seeded, False)  # an option's identity wins
    with pytest.raises(ValueError, match="tls://"):
        parse_url("ws://h:1", Auth())
    assert conn_module.status_of(b"NATS/1.0 404 Message Not Found\r\n\r\n") == (404, "Message Not Found")


def _direct_frame(reply: bytes, seq: int, subject: bytes, stored: bytes, payload: bytes) -> tuple[bytes, bytes]:
    """An HMSG Direct Get answer as the server sends it, and its header block."""
    block = (stored[:-2] if stored else b"NATS/1.0\r\n") + (
        b"Nats-Stream: S\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: 2026-11-27T17:00:%02d.%09dZ\r\n"
        b"Nats-Num-Pending: 3\r\nNats-Last-Sequence: 0\r\n\r\n"
    ) % (subject, seq, seq % 60, seq * 7919 % 10**9)
    return b"HMSG %s 1 %d %d\r\n%s%s\r\n" % (reply, len(block), len(block) + len(payload), block, payload), block


STORED = st.sampled_from([
    b"", b"NATS/1.0\r\nA: 1\r\n\r\n",
    # a republished message stores the headers the server appends: they must not be taken for them
    b"NATS/1.0\r\nNats-Stream: R\r\nNats-Subject: r.x\r\nNats-Sequence: 99\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\n"
    b"Nats-Num-Pending: 0\r\nNats-Last-Sequence: 98\r\n\r\n",
])
EOB = b"HMSG _INBOX.x.9 1 20 20\r\nNATS/1.0 204 EOB\r\n\r\n\r\n"


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 10**9), st.sampled_from([b"a", b"b.c"]), STORED, st.binary(max_size=30)), max_size=8),
    st.lists(st.integers(0, 10**6), max_size=6),
)
def test_plain_direct_fast_path_equals_parse_message(frames, cuts) -> None:
    """take_plain (a regex over the buffer) gives the Message parse_message gives for every frame it
    takes, and leaves the others (stored headers, status) to next_frame, however the bytes are cut."""
    from appliance.spark import directget

    built = [_direct_frame(b"_INBOX.x.%d" % k, *f) for k, f in enumerate(frames)]
    with pytest.MonkeyPatch.context() as patch:
        conn, _fake = connect_over(patch, b"".join(w for w, _ in built) + EOB, cuts)
        for k, ((_seq, _subject, stored, payload), (_wire, block)) in enumerate(zip(frames, built)):
            fast = directget.take_plain(conn)
            if fast is None:
                frame = conn.next_frame()
                reply, msg = frame.subject, directget.parse_message(frame.headers, frame.payload)
            else:
                reply, msg = fast
                assert not stored  # only answers without stored headers take the fast path
            assert reply == f"_INBOX.x.{k}"
            assert msg == directget.parse_message(block, payload)
        assert directget.take_plain(conn) is None
        assert conn.next_frame().headers.startswith(b"NATS/1.0 204")


def test_plain_direct_answers_buffered_whole_take_the_fast_path(monkeypatch) -> None:
    from appliance.spark import directget

    built = [_direct_frame(b"_INBOX.x.%d" % k, k + 1, b"a.b", b"", b"p%d" % k) for k in range(3)]
    conn, _fake = connect_over(monkeypatch, b"".join(w for w, _ in built) + EOB, [])
    conn.next_frame()  # the first from the socket; the rest are buffered now
    taken = [directget.take_plain(conn) for _ in range(2)]
    assert [(r, m.seq, m.data) for r, m in taken] == [("_INBOX.x.1", 2, b"p1"), ("_INBOX.x.2", 3, b"p2")]
    assert directget.take_plain(conn) is None  # the EOB status
