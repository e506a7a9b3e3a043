"""A socket stand-in for the Spark connector's client (appliance/spark/conn.py) without a server."""

from __future__ import annotations


class FakeSocket:
    """Hands out the given chunks one recv at a time (then b"": the server closed) and keeps what
    the client sent."""

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
