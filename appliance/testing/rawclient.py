"""A blocking raw-protocol NATS client for tests: send bytes, read until a pattern, with deadlines."""

from __future__ import annotations

import json
import socket
import time


class RawClient:
    def __init__(self, port: int, *, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.timeout_s = timeout_s
        self.buffer = b""
        line = self.read_until(b"\r\n")
        assert line.startswith(b"INFO ")
        self.info = json.loads(line[5:].strip())

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, marker: bytes) -> bytes:
        """Everything up to and including `marker`; raises TimeoutError or EOFError."""
        deadline = time.monotonic() + self.timeout_s
        while marker not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {marker!r} in {self.buffer[-200:]!r}")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buffer)
            self.buffer += chunk
        end = self.buffer.index(marker) + len(marker)
        found, self.buffer = self.buffer[:end], self.buffer[end:]
        return found

    def read_exact(self, size: int) -> bytes:
        """The next `size` bytes; raises TimeoutError or EOFError."""
        deadline = time.monotonic() + self.timeout_s
        while len(self.buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{size} bytes wanted, have {self.buffer[-200:]!r}")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buffer)
            self.buffer += chunk
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def read_msg(self) -> tuple[list[bytes], bytes, bytes]:
        """The next MSG/HMSG (PINGs answered, PONG/+OK skipped): its control line's tokens,
        header bytes and payload."""
        while True:
            line = self.read_until(b"\r\n")[:-2]
            if line == b"PING":
                self.send(b"PONG\r\n")
                continue
            if line in (b"PONG", b"+OK"):
                continue
            tokens = line.split()
            if tokens[0] == b"MSG":
                return tokens, b"", self.read_exact(int(tokens[-1]) + 2)[:-2]
            if tokens[0] == b"HMSG":
                header_size, total = int(tokens[-2]), int(tokens[-1])
                data = self.read_exact(total + 2)[:-2]
                return tokens, data[:header_size], data[header_size:]
            raise AssertionError(f"unexpected {line!r}")

    def read_to_close(self) -> bytes:
        """Everything until the server closes the connection (bounded by the timeout)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"still open; got {self.buffer[-200:]!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                data, self.buffer = self.buffer, b""
                return data
            self.buffer += chunk

    def close(self) -> None:
        self.sock.close()
