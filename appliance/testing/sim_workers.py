"""Worker servers joined by simulated links, each on its own SimLoop, with clients made of bytes.

The whole cross-worker path of core NATS — a client's bytes, the parser, the sublists, LocalFabric,
the frames on the links, the interest sync — runs unchanged, but nothing runs unless the test says
so: a worker is busy (or descheduled) while the test does not run its loop, time moves only with
`advance`, and a worker dies when the test kills it (its loop never runs again, its process exits
in the SimLiveness table, and a successor attaches to the same link queues, as a restarted worker
attaches to the same rings). No sockets, no clock, no threads.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import weakref
from collections.abc import Iterable

from appliance.clock import ManualClock
from appliance.config.options import ServerOptions
from appliance.fabric.link import Link
from appliance.fabric.sim import SimLink, sim_link_pair
from appliance.server.client import ClientConnection
from appliance.server.links import LocalFabric
from appliance.server.server import Server
from appliance.testing.sim_loop import SimLiveness, SimLoop

LINK_BYTES = 64 * 1024
SEQUENCE_STEP = 1_000_000  # each incarnation numbers its interest changes above its predecessor's


class InputSignal:
    """Stands for the client's socket where the server looks at its fd: an eventfd that is readable
    exactly while client bytes wait unread (the server polls it to see whether more input is there)."""

    family = socket.AF_UNIX

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)

    def fileno(self) -> int:
        return self._fd

    def set(self, waiting: bool) -> None:
        if waiting:
            os.eventfd_write(self._fd, 1)
        else:
            try:
                os.eventfd_read(self._fd)
            except BlockingIOError:
                pass


class MemoryTransport:
    """The transport of one client connection: what the server writes is kept; what the client sends
    reaches the protocol on the worker's loop, and waits while the server paused reading."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self.protocol: ClientConnection | None = None
        self.written = bytearray()
        self.inbox = bytearray()  # sent by the client, not read by the server yet
        self.reading = True
        self.closed = False
        self.write_buffer_high = 0
        self.signal = InputSignal()
        self._delivery_scheduled = False
        self._during_next_read = b""

    # --- the asyncio transport surface the server uses -------------------------------------------

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.signal if name == "socket" else default  # no peer address

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.write_buffer_high = high or 0

    def write(self, data: bytes | bytearray) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0  # the test reads everything written at once

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self._schedule_delivery()

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    # --- the client's side -----------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """The client writes: the bytes are read by the server on its loop (one read per send)."""
        self.inbox += data
        self.signal.set(True)
        self._schedule_delivery()

    def send_during_next_read(self, data: bytes) -> None:
        """Bytes that arrive while the server handles its next read: they are in the socket when the
        server looks, and come in the read after (nats-py's pending SUB right behind its flush PING)."""
        self._during_next_read = data

    def take_written(self) -> bytes:
        data = bytes(self.written)
        self.written.clear()
        return data

    def _schedule_delivery(self) -> None:
        if not self._delivery_scheduled and self.inbox and self.reading:
            self._delivery_scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._delivery_scheduled = False
        if not self.reading or self.closed or not self.inbox or self.protocol is None:
            return
        data = bytes(self.inbox)
        self.inbox.clear()
        self.signal.set(False)
        if self._during_next_read:
            late, self._during_next_read = self._during_next_read, b""
            self.send(late)
        self.protocol.data_received(data)


class SimClient:
    """A raw NATS client on one worker: sends protocol lines, reads what the server wrote."""

    def __init__(self, worker: SimWorker, cid: int) -> None:
        self.worker = worker
        self.transport = MemoryTransport(worker.loop)
        self.conn = ClientConnection(worker.server, cid)
        self.transport.protocol = self.conn
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.received = bytearray()

    def send(self, data: bytes) -> None:
        self.transport.send(data)

    def send_split(self, first: bytes, then: bytes) -> None:
        """Two writes the server reads apart: `then` arrives while it handles `first`."""
        self.transport.send_during_next_read(then)
        self.transport.send(first)

    def read(self) -> bytes:
        """Everything the server wrote since the last read (INFO, PONGs, MSGs, ...)."""
        self.received += self.transport.take_written()
        data = bytes(self.received)
        self.received.clear()
        return data


class SimWorker:
    """One worker process: a Server and its LocalFabric on a SimLoop of their own."""

    def __init__(self, index: int, links: dict[int, Link], *, pid: int, table: SimLiveness,
                 incarnation: int = 0, seed: int = 0) -> None:
        self.index = index
        self.pid = pid
        self.loop = SimLoop(f"worker {index} (pid {pid})")
        self.links = links
        self.clock = ManualClock()
        self.server = _server_off_loop(self.clock, random.Random(seed * 1000 + index))
        self.server.loop = self.loop  # type: ignore[assignment]  # the parts of a loop the server uses
        self.fabric = LocalFabric(self.server, links, sequence_base=(incarnation + 1) * SEQUENCE_STEP,
                                  pid=pid, liveness=table.for_loop(self.loop))
        self.fabric.start(self.loop)
        self._next_cid = index + 1
        self.alive = True

    def connect(self) -> SimClient:
        cid = self._next_cid
        self._next_cid += 100
        return SimClient(self, cid)

    def run(self) -> int:
        """Run this worker until it has nothing left to do right now."""
        assert self.alive, f"worker {self.index} (pid {self.pid}) is dead"
        return self.loop.run_ready()

    def step(self) -> bool:
        """Run one callback of this worker (one client read, one link batch, ...); False if idle."""
        assert self.alive, f"worker {self.index} (pid {self.pid}) is dead"
        return self.loop.run_one()

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass on this worker (its timers fire)."""
        assert self.alive
        self.clock.advance(seconds)
        self.loop.advance(seconds)


class SimWorkers:
    """N workers fully meshed by SimLinks; kill and restart them by index."""

    def __init__(self, count: int, *, seed: int = 0) -> None:
        assert count >= 2
        self.table = SimLiveness()
        self.seed = seed
        self._ends: dict[tuple[int, int], SimLink] = {}  # (worker, peer) -> worker's end
        for low in range(count):
            for high in range(low + 1, count):
                a, b = sim_link_pair(LINK_BYTES, peers=(low, high))
                self._ends[(low, high)] = a
                self._ends[(high, low)] = b
        self._next_pid = 1000
        self._incarnations = [0] * count
        self.workers = [self._spawn(index) for index in range(count)]

    def __getitem__(self, index: int) -> SimWorker:
        return self.workers[index]

    def _spawn(self, index: int) -> SimWorker:
        self._next_pid += 1
        links: dict[int, Link] = {peer: end for (worker, peer), end in self._ends.items() if worker == index}
        return SimWorker(index, links, pid=self._next_pid, table=self.table,
                         incarnation=self._incarnations[index], seed=self.seed)

    def kill(self, index: int) -> None:
        """SIGKILL: the worker runs no more, and its process is gone for everyone watching its pid."""
        worker = self.workers[index]
        worker.alive = False
        self.table.exit(worker.pid)

    def restart(self, index: int) -> SimWorker:
        """The supervisor's restart: a new process attaches to the same link queues (rings outlive
        their worker) and says HELLO."""
        assert not self.workers[index].alive, "kill it first"
        for (worker, peer), end in list(self._ends.items()):
            if worker == index:
                self._ends[(worker, peer)] = end.reattach()
        self._incarnations[index] += 1
        self.workers[index] = self._spawn(index)
        return self.workers[index]

    def run(self, indexes: Iterable[int] | None = None, *, rounds_max: int = 1000) -> None:
        """Run the given live workers (default: all live ones) in turn until none has work left."""
        chosen = [self.workers[i] for i in indexes] if indexes is not None else \
            [worker for worker in self.workers if worker.alive]
        for _ in range(rounds_max):
            if sum(worker.run() for worker in chosen) == 0:
                return
        raise AssertionError(f"workers still busy after {rounds_max} rounds")


def _server_off_loop(clock: ManualClock, rng: random.Random) -> Server:
    """Server() takes the current asyncio loop as its default; give it a throwaway one (the SimLoop
    replaces it at once) so building a simulated worker needs no running loop."""
    placeholder = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(placeholder)
        return Server(ServerOptions(), server_id="NSIMWORKERS", start_wall_s=0.0, clock=clock, rng=rng)
    finally:
        asyncio.set_event_loop(None)
        placeholder.close()
