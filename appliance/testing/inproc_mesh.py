"""Several workers' servers in one background thread, joined by real links (rings or socketpairs).

Each server listens on its own loopback port, so a test can put each client on the worker it
wants — the "test hook that pins a connection to a worker" of the workers issue.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from appliance import limits
from appliance.config.options import ServerOptions
from appliance.fabric.mesh import Transport, WorkerMesh, attach_mesh, create_mesh
from appliance.server.links import LocalFabric
from appliance.server.monitor_view import provide_snapshots
from appliance.server.server import Server

START_TIMEOUT_S = 10.0
T = TypeVar("T")


class InProcessMesh:
    def __init__(self, workers: int, *, transport: Transport | None = None,
                 ring_bytes: int = limits.RING_BYTES, options: ServerOptions | None = None) -> None:
        assert workers >= 2
        self.workers = workers
        self.transport = transport
        self.ring_bytes = ring_bytes
        self.options = options or ServerOptions()
        self.servers: list[Server] = []
        self.fabrics: list[LocalFabric] = []
        self.ports: list[int] = []
        self._meshes: list[WorkerMesh] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def url(self, worker: int) -> str:
        return f"nats://127.0.0.1:{self.ports[worker]}"

    def __enter__(self) -> InProcessMesh:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError("in-process mesh did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            mesh = create_mesh(self.workers, transport=self.transport, ring_bytes=self.ring_bytes)
            try:
                for index in range(self.workers):
                    self._meshes.append(attach_mesh(mesh.spec_for_local(index)))
            finally:
                mesh.close()
            for index in range(self.workers):
                listener = socket.socket()
                listener.bind(("127.0.0.1", 0))
                listener.listen(128)
                listener.setblocking(False)
                self.ports.append(listener.getsockname()[1])
                server = Server(self.options, server_id="NTESTMESH", start_wall_s=0.0)
                await server.start(listener, cid_base=index * 1_000_000)
                fabric = LocalFabric(server, self._meshes[index].links)
                self.servers.append(server)
                self.fabrics.append(fabric)
            for server, fabric in zip(self.servers, self.fabrics):
                fabric.start(self._loop)
                provide_snapshots(server, fabric)
            self._started.set()
            await self._stop.wait()
            for server in self.servers:
                await server.shutdown()
            for fabric in self.fabrics:
                fabric.close()
            for worker_mesh in self._meshes:
                worker_mesh.close()
            await asyncio.sleep(0)

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._error = exc
            self._started.set()

    def call(self, fn: Callable[..., T], *args: object) -> T:
        assert self._loop is not None

        async def on_loop() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(on_loop(), self._loop).result(START_TIMEOUT_S)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
