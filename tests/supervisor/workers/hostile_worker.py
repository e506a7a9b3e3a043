"""A worker target for process tests (importable through PYTHONPATH=tests/supervisor/workers): the real
worker, plus internal services on worker 0 that misbehave on request.

- `boom.>` raises RecursionError, as deeply nested JSON once did inside a JetStream API handler;
- `echo.>` answers its request (the proof that the worker still serves its siblings' clients);
- `stall.links` makes worker 0 stop taking frames from its siblings (its link drains are replaced
  by no-ops): the state a drain that died left behind, which the worker must notice itself.
"""

from __future__ import annotations

from appliance.server.internal import InternalClient
from appliance.server.links import LocalFabric
from appliance.server.server import Server
from appliance.worker import main
from appliance.worker.context import WorkerContext


def install(server: Server) -> None:
    client = InternalClient(server, server.global_account(), "hostile-test")

    def boom(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        raise RecursionError("maximum recursion depth exceeded (injected)")

    def echo(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if reply:
            client.publish(reply, b"echo:" + data)

    def stall(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        fabric = server.interest_gate
        server.before_client_read = None
        for peer in fabric.peers.values():  # type: ignore[union-attr]
            peer.link._drain = lambda: None  # type: ignore[attr-defined]
        if reply:
            client.publish(reply, b"stalled")

    client.subscribe(b"boom.>", boom)
    client.subscribe(b"echo.>", echo)
    client.subscribe(b"stall.links", stall)


async def serve(ctx: WorkerContext) -> int:
    provide_snapshots = main.provide_snapshots

    def provide_snapshots_then_install(server: Server, fabric: LocalFabric) -> None:
        provide_snapshots(server, fabric)  # called once the fabric started: our interest reaches siblings
        if ctx.worker_index == 0:
            install(server)

    main.provide_snapshots = provide_snapshots_then_install  # type: ignore[assignment]
    return await main.serve_worker(ctx)
