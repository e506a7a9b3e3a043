"""The Spark tasks' NATS client parses MSG/HMSG frames however the bytes are cut (property test),
answers server PINGs, and reports -ERR with the server's words."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.spark import conn as conn_module
from appliance.spark.conn import Auth, Connection, NatsError, parse_url


class FakeSocket:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.sent = b""

    def recv(self, size: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def sendall(self, data: bytes) -> None:
        self.sent += bytes(data)

    def settimeout(self, value: float) -> None:
        pass

    def setsockopt(self, *args: object) -> None:
        pass

    def close(self) -> None:
        pass


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
    assert parse_url("nats://u:p%40ss@h:5", Auth()) == ("h", 5, Auth("u", "p@ss"))
    assert parse_url("nats://tok@h", Auth()) == ("h", 4222, Auth(token="tok"))
    assert parse_url("h:7", Auth(token="x")) == ("h", 7, Auth(token="x"))
    with pytest.raises(ValueError, match="TLS"):
        parse_url("tls://h:1", Auth())
    assert conn_module.status_of(b"NATS/1.0 404 Message Not Found\r\n\r\n") == (404, "Message Not Found")
