"""Raw client exchanges for operator-mode tests: CONNECT with a user JWT and the nonce signed by
its key, then read what the server answers (its async INFO reduced to the account it names)."""

from __future__ import annotations

import base64
import json
import socket
import time
from dataclasses import dataclass

from appliance.testing.jwts import Key


@dataclass
class Exchange:
    info: dict[str, object]
    answer: bytes


def exchange(port: int, token: str | None, key: Key | None, lines: bytes = b"", *, until: bytes = b"PONG\r\n",
             timeout_s: float = 5.0) -> Exchange:
    """CONNECT with `token` signed by `key`, then `lines` and a PING; what came back until `until`
    (or the connection closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        line = b""
        while not line.endswith(b"\r\n"):
            line += sock.recv(1)
        info = json.loads(line[5:])
        connect: dict[str, object] = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True}
        if token is not None:
            connect["jwt"] = token
        if key is not None:
            connect["sig"] = base64.urlsafe_b64encode(key.sign(str(info["nonce"]).encode())).decode().rstrip("=")
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n" + lines + b"PING\r\n")
        answer = b""
        deadline = time.monotonic() + timeout_s
        while not _complete(answer, until) and time.monotonic() < deadline:
            try:
                chunk = sock.recv(4096)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            answer += chunk
        return Exchange(info, _mask_info(answer.replace(b"PING\r\n", b"")))


def _complete(answer: bytes, until: bytes) -> bool:
    """Whether the answer holds `until`; for the first PONG, also the INFO (connect_info) that
    both servers send right after it to a protocol-1 client: nats-server may write the two
    separately, so a read that stopped at the PONG would sometimes miss its INFO."""
    at = answer.find(until)
    if at < 0:
        return False
    if until != b"PONG\r\n":
        return True
    rest = answer[at + len(until):]
    start = rest.find(b"INFO ")
    return start >= 0 and rest.find(b"\r\n", start) >= 0


def _mask_info(answer: bytes) -> bytes:
    """The INFO sent after CONNECT (connect_info) reduced to the account it names: server ids,
    ports and build fields differ between the two servers by nature."""
    out = []
    for line in answer.split(b"\r\n"):
        if line.startswith(b"INFO "):
            fields = json.loads(line[5:])
            line = b"INFO remote_account=" + str(fields.get("remote_account", "")).encode()
        out.append(line)
    return b"\r\n".join(out)


def connected(port: int, token: str, key: Key) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    line = b""
    while not line.endswith(b"\r\n"):
        line += sock.recv(1)
    nonce = str(json.loads(line[5:])["nonce"]).encode()
    sig = base64.urlsafe_b64encode(key.sign(nonce)).decode().rstrip("=")
    sock.sendall(b"CONNECT " + json.dumps({"jwt": token, "sig": sig, "verbose": False}).encode() + b"\r\nPING\r\n")
    assert read_until(sock, b"PONG\r\n").startswith(b"PONG\r\n")
    return sock


def read_until(sock: socket.socket, marker: bytes, timeout_s: float = 10.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout_s
    while marker not in data and time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
    return data
