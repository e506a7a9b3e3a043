"""A small worker target for supervisor tests: line echo on the shared client socket.

Same shape as appliance.worker.main:serve_worker (an async function taking the worker context,
returning an exit code), without the NATS server behind it, so process-level tests of the
supervisor start fast and assert on simple replies:

    client sends   b"hello\\n"
    worker answers b"worker <index> pid <pid>: hello\\n"

It heartbeats and publishes counters every HEARTBEAT_INTERVAL_S, stops cleanly on SIGTERM/SIGINT
(exit 0), and on SIGUSR2 logs nats-server's lame duck line, stops accepting, closes its clients
and exits 0. The context is typed structurally so testing/ does not import worker/.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import Protocol

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 0.25
LINE_BYTES_MAX = 4096
EXIT_CODE_ENV = "APPLIANCE_ECHO_EXIT_CODE"  # set: exit at once with this code (restart-budget tests)


class _Status(Protocol):
    def heartbeat(self) -> None: ...

    def set_counters(
        self, *, connections: int, msgs_in: int, msgs_out: int, bytes_in: int, bytes_out: int
    ) -> None: ...


class _Context(Protocol):
    @property
    def worker_index(self) -> int: ...

    @property
    def client_listener(self) -> socket.socket: ...

    @property
    def status(self) -> _Status | None: ...

    def on_ready(self) -> None: ...


class _Counters:
    def __init__(self) -> None:
        self.connections = 0
        self.msgs_in = 0
        self.msgs_out = 0
        self.bytes_in = 0
        self.bytes_out = 0


async def serve_echo(ctx: _Context) -> int:
    exit_code = os.environ.get(EXIT_CODE_ENV)
    if exit_code is not None:
        logger.error("echo worker %d exits with %s as told by %s", ctx.worker_index, exit_code, EXIT_CODE_ENV)
        return int(exit_code)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    counters = _Counters()
    writers: set[asyncio.StreamWriter] = set()
    prefix = f"worker {ctx.worker_index} pid {os.getpid()}: ".encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        counters.connections += 1
        try:
            while line := await reader.readuntil(b"\n"):
                counters.msgs_in += 1
                counters.bytes_in += len(line)
                writer.write(prefix + line)
                counters.msgs_out += 1
                counters.bytes_out += len(prefix) + len(line)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            counters.connections -= 1
            writers.discard(writer)
            writer.close()

    def lame_duck() -> None:
        logger.info("Entering lame duck mode, stop accepting new clients")
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGUSR2, lame_duck)
    ctx.client_listener.setblocking(False)
    server = await asyncio.start_server(handle, sock=ctx.client_listener, limit=LINE_BYTES_MAX)
    heartbeat = loop.create_task(_heartbeat(ctx.status, counters))
    ctx.on_ready()
    try:
        await stop.wait()
    finally:
        heartbeat.cancel()
        server.close()
        for writer in list(writers):
            writer.close()
        await server.wait_closed()
    return 0


async def _heartbeat(status: _Status | None, counters: _Counters) -> None:
    while True:
        if status is not None:
            status.heartbeat()
            status.set_counters(connections=counters.connections, msgs_in=counters.msgs_in,
                                msgs_out=counters.msgs_out, bytes_in=counters.bytes_in,
                                bytes_out=counters.bytes_out)
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)


async def serve_crash(ctx: _Context) -> int:
    """A target that fails before serving, as a bug would: the worker process must log and exit 1."""
    raise RuntimeError(f"echo worker {ctx.worker_index} crashed on purpose")
