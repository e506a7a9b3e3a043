"""Differential: the same bytes to appliance and to the real nats-server 2.15.1, same answers.

INFO lines are masked (ids, ports and versions differ by design); everything else must be equal.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import pytest

from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

SETTLE_S = 0.3  # both servers answer within this; used as a quiet-period bound, not as a wait for an event


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[int, int]]:
    with NatsServer() as real, InProcessServer() as ours:
        yield real.port, ours.port


def exchange(port: int, data: bytes) -> bytes:
    """Send data after the INFO; collect what comes back until close or a quiet period."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        info = b""
        while not info.endswith(b"\r\n"):
            info += sock.recv(4096)
        sock.sendall(data)
        received = b""
        sock.settimeout(SETTLE_S)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                return received + b"<closed>"
            if not chunk:
                return received + b"<closed>"
            received += chunk
        return received


def masked(data: bytes) -> bytes:
    return re.sub(rb"INFO \{.*?\} \r\n", b"INFO {...}\r\n", data)


CASES = [
    b"PING\r\n",
    b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 5\r\nhello\r\nPING\r\n',
    b'CONNECT {"verbose":true}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\nUNSUB 1\r\nPING\r\nPONG\r\n',
    b"CONNECT {}\r\nPING\r\n",
    b'CONNECT {"protocol":1,"verbose":false}\r\nSUB a.* 1\r\nSUB b.> 2\r\nPUB a.b 1\r\n1\r\nPUB b.c.d 1\r\n2\r\nPING\r\n',
    b'CONNECT {"verbose":false,"pedantic":true}\r\nPUB foo.* 2\r\nhi\r\nSUB foo..bar 1\r\nSUB >.a 2\r\nPING\r\n',
    b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.a.* 1\r\nPUB svc _INBOX.a.1 0\r\n\r\nPING\r\n',
    b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n',
    b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nUNSUB 1 2\r\nPUB foo 1\r\na\r\nPUB foo 1\r\nb\r\nPUB foo 1\r\nc\r\nPING\r\n',
    b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 1\r\nPUB foo 1\r\nx\r\nPING\r\n',
    b'CONNECT {"verbose":false,"headers":true}\r\nSUB h 1\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n',
    b'CONNECT {"verbose":false}\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n',
    b'CONNECT {"verbose":false,"no_responders":true}\r\n',
    b'CONNECT {"verbose":false}\r\nSUB q.x grp 1\r\nPUB q.x 0\r\n\r\nPING\r\n',
    b"GARBAGE\r\n",
    b"PUB foo 3\r\nabcd\r\n",
    b"PUB foo\r\n",
    b"SUB foo\r\n",
    b"UNSUB\r\n",
    b"MSG foo 1 2\r\nhi\r\n",
    b"-ERR 'x'\r\n",
    b"PUB foo 2000000\r\n",
    b"SUB " + b"a" * 5000 + b" 1\r\n",
    b"CONNECT {bad json\r\n",
    b"pub\tfoo\t2\r\nhi\r\nping\r\n",
    b"PUB foo 2\nhi\nPING\n",
    b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 0\r\n\r\nPING\r\n',
]
# Known, deliberate difference: nats-server copies a size token with leading zeros ("PUB foo 00003")
# into the MSG line verbatim; we write the number ("MSG foo 1 3"). Both are valid for every client.


@pytest.mark.parametrize("data", CASES, ids=[repr(c[:40]) for c in CASES])
def test_same_bytes_same_answers(servers: tuple[int, int], data: bytes) -> None:
    real_port, our_port = servers
    assert masked(exchange(our_port, data)) == masked(exchange(real_port, data))
