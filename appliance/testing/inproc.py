"""Run the core server on a loopback port in a background thread (its own event loop), for tests.

The real process entry is `appliance run`; this harness serves the same Server object without
the supervisor so behaviour tests start in milliseconds.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from appliance.config.options import ServerOptions
from appliance.server.server import Server
from appliance.jetstream.service import start_jetstream

START_TIMEOUT_S = 10.0
T = TypeVar("T")


class InProcessServer:
    def __init__(self, options: ServerOptions | None = None, *, server_id: str = "NTESTSERVER",
                 jetstream_dir: str | None = None) -> None:
        self.options = options or ServerOptions()
        if jetstream_dir is not None:  # JetStream in this (temporary) store directory
            self.options.jetstream.enabled = True
            self.options.jetstream.store_dir = jetstream_dir
        self.options.host = "127.0.0.1"
        self.server_id = server_id
        self.server: Server | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def __enter__(self) -> InProcessServer:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self.options.port = self.port
        self._thread = threading.Thread(target=self._run, args=(listener,), daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError("in-process server did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self, listener: socket.socket) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.server = Server(self.options, server_id=self.server_id, start_wall_s=0.0)
            await self.server.start(listener)
            jetstream = start_jetstream(self.server) if self.options.jetstream.enabled else None
            self._started.set()
            await self._stop.wait()
            if jetstream is not None:
                jetstream.stop()
            await self.server.shutdown()
            await asyncio.sleep(0)

        try:
            asyncio.run(serve())
        except BaseException as exc:  # surfaced to the test thread
            self._error = exc
            self._started.set()

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """Run fn(*args) on the server's loop thread (the server is not thread-safe); wait for it."""
        assert self._loop is not None

        async def on_loop() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(on_loop(), self._loop).result(START_TIMEOUT_S)

    def call_async(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Await fn() on the server's loop thread; wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(START_TIMEOUT_S)  # type: ignore[arg-type]

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
