"""The composition root of one worker process: builds the server from its context and serves.

The supervisor's process entry (`appliance/worker/process.py`) builds the WorkerContext and
runs `serve_worker` on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import signal
import time
from collections.abc import Callable
from pathlib import Path

from appliance import limits
from appliance.fabric.mesh import WorkerMesh, WorkerMeshSpec, attach_mesh
from appliance.cluster.raft_host import RaftHost
from appliance.jetstream.service import start_jetstream, start_relay
from appliance.server.cluster_urls import follow_cluster_urls
from appliance.server.links import LocalFabric
from appliance.config.options import ServerOptions
from appliance.log import setup_logging
from appliance.server.monitor.http import MonitorServer
from appliance.server.account_gate import AccountGate
from appliance.server.jwt_accounts import JWTAccounts
from appliance.server.monitor_view import provide_snapshots, start_claims_service, start_monitoring, start_system_responder
from appliance.server.reload import apply_reload
from appliance.server.routes import RouteManager
from appliance.server.server import Server
from appliance.supervisor.status_table import StatusTable
from appliance.worker.context import WorkerContext

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 0.25
ROUTES_REPORT_INTERVAL_S = 1.0


async def serve_worker(ctx: WorkerContext) -> int:
    """Serve clients until SIGTERM/SIGINT (clean stop) or the end of lame duck mode (SIGUSR2)."""
    loop = asyncio.get_running_loop()
    server = Server(ctx.options, server_id=ctx.server_id, start_wall_s=ctx.start_wall_s)
    server.connection_gate = ctx.connection_gate
    jwt_accounts = JWTAccounts(server) if ctx.options.trust.resolver == "FULL" else None  # before any client
    gate_path = ctx.extra.get("account_gate_path")
    if isinstance(gate_path, str) and gate_path:
        server.account_gate = AccountGate(gate_path, ctx.worker_index, ctx.worker_count)
    stop = asyncio.Event()
    lame_duck: list[asyncio.Task[None]] = []

    def on_lame_duck() -> None:
        if not lame_duck:
            task = loop.create_task(server.enter_lame_duck())
            task.add_done_callback(lambda _: stop.set())
            lame_duck.append(task)

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGUSR2, on_lame_duck)
    reload_path = ctx.extra.get("reload_path")
    reloader = OptionsReloader(server, Path(reload_path)) if isinstance(reload_path, str) and reload_path else None
    if reloader is not None:
        loop.add_signal_handler(signal.SIGHUP, reloader.reload)
    loop.add_signal_handler(signal.SIGUSR1, lambda: setup_logging(**server.options.logging_settings()))  # reopen
    ctx.client_listener.setblocking(False)
    # worker k of n hands out client ids k+1, k+1+n, k+1+2n, ...: small and unique on the host
    await server.start(ctx.client_listener, cid_base=ctx.worker_index + 1 - ctx.worker_count,
                       cid_step=ctx.worker_count)
    if ctx.websocket_listener is not None:
        ctx.websocket_listener.setblocking(False)
        await server.start_websocket(ctx.websocket_listener)
    fabric, mesh = _start_fabric(server, ctx, loop)
    monitor = None
    table = None
    if ctx.http_listener is not None:
        table = _provide_worker_rows(server, ctx)
        monitor = await _start_monitor(server, ctx, fabric)
    heartbeat = loop.create_task(_heartbeat(server, ctx, fabric))
    routes_status = None
    routes = None
    clustered = ctx.options.cluster.enabled or bool(ctx.options.cluster.routes)
    if ctx.worker_index == 0 and clustered:
        routes = await _start_routes(server, ctx, fabric)
        path = ctx.extra.get("routes_status_path")
        if isinstance(path, str):
            routes_status = loop.create_task(_report_routes(routes, Path(path)))
    runs_jetstream = ctx.options.jetstream.enabled and ctx.worker_index == 0
    # clustered JetStream: the RAFT groups of this worker talk over the routes (cluster/raft_host.py)
    raft = RaftHost(server, loop) if routes is not None and runs_jetstream else None
    jetstream = start_jetstream(server, raft=raft, routes=routes) if runs_jetstream else None
    relay = start_relay(server) if ctx.options.jetstream.enabled and ctx.worker_index != 0 else None
    if reloader is not None and jetstream is not None:  # accounts' JetStream limits are read from its options
        reloader.listeners.append(jetstream.reload_options)
    urls_follower = follow_cluster_urls(server) if ctx.worker_index != 0 and clustered else None
    system = start_system_responder(server, fabric) if ctx.worker_index == 0 and _system_askable(ctx) else None
    claims = None
    if jwt_accounts is not None:
        jwt_accounts.start()
        claims = start_claims_service(server, jwt_accounts, fabric) if ctx.worker_index == 0 else None
    ctx.on_ready()
    try:
        await stop.wait()
    finally:
        heartbeat.cancel()
        if routes_status is not None:
            routes_status.cancel()
        for task in lame_duck:
            task.cancel()
        if jetstream is not None:
            jetstream.stop()
        if relay is not None:
            relay.close()
        if raft is not None:
            raft.close()
        if routes is not None:
            await routes.close()
        if urls_follower is not None:
            urls_follower.close()
        if system is not None:
            system.close()
        if claims is not None:
            claims.close()
        if jwt_accounts is not None:
            jwt_accounts.close()
        await server.shutdown()
        if server.account_gate is not None:
            server.account_gate.close()
        if fabric is not None:
            fabric.close()
        if mesh is not None:
            mesh.stop_rejoins()  # its fds and mapping go with the process
        if monitor is not None:
            await monitor.close()
        if table is not None:
            table.close()
        # give transports a turn to write what close() flushed
        await asyncio.sleep(0)
    return 0


def _system_askable(ctx: WorkerContext) -> bool:
    """Whether anyone can send this server a system-account request: a user of the system account, or
    another server of the cluster (over a route)."""
    options = ctx.options
    system = options.system_account or "$SYS"
    if options.no_system_account:
        return False
    if options.trust.enabled:  # operator mode: users of the system account come with JWTs
        return True
    users = [*options.authorization.users, *(u for a in options.accounts.values() for u in a.users)]
    return (options.cluster.enabled or bool(options.cluster.routes) or system in options.accounts
            and bool(options.accounts[system].users) or any(u.account == system for u in users))


async def _start_routes(server: Server, ctx: WorkerContext, fabric: LocalFabric | None) -> RouteManager:
    """Worker 0 holds every route of the host (one route per peer server): its sublists hold the
    interest of every worker (links.py), and the routes' interest reaches the siblings as worker 0's."""
    routes = RouteManager(server, interest_sink=None if fabric is None else fabric.on_local_interest)
    if fabric is not None:
        fabric.sibling_interest_listeners.append(routes.on_interest)
    server.routes = routes
    await routes.start(ctx.cluster_listener)
    return routes


def _provide_worker_rows(server: Server, ctx: WorkerContext) -> StatusTable | None:
    """/metrics shows every worker's row of the supervisor's status table (read-only use of our mapping)."""
    fd = ctx.extra.get("status_fd")
    if not isinstance(fd, int):
        return None
    table = StatusTable.attach(os.dup(fd))  # its own descriptor: close() must not take the writer's
    clock = server.clock

    def rows() -> list[dict[str, object]]:
        now = clock.monotonic()
        return [{"index": row.index, "state": row.state.name.lower(), "restarts": row.restarts,
                 "ring_fill": row.ring_fill, "connections": row.connections,
                 "heartbeat_age_s": max(0.0, now - row.heartbeat_mono_s) if row.heartbeats else 0.0}
                for row in table.snapshots()]

    server.worker_rows = rows  # type: ignore[attr-defined]
    return table


async def _start_monitor(server: Server, ctx: WorkerContext, fabric: LocalFabric | None) -> MonitorServer:
    assert ctx.http_listener is not None
    ctx.http_listener.setblocking(False)
    cores = ctx.extra.get("server_cores")
    return await start_monitoring(server, ctx.http_listener, fabric, cores=cores if isinstance(cores, int) else None)


def _start_fabric(server: Server, ctx: WorkerContext,
                  loop: asyncio.AbstractEventLoop) -> tuple[LocalFabric | None, WorkerMesh | None]:
    """Join the sibling workers over the links the supervisor created (none with one worker). With
    socketpair links, a sibling that restarts later is rejoined over the fresh socket the supervisor
    hands over (mesh.listen_for_rejoins); its HELLO then resyncs interest as on a ring."""
    spec = ctx.extra.get("mesh_spec")
    if spec is None:
        return None, None
    if isinstance(spec, str):
        spec = WorkerMeshSpec.from_json(spec)
    assert isinstance(spec, WorkerMeshSpec)
    mesh = attach_mesh(spec)
    fabric = LocalFabric(server, mesh.links)
    fabric.start(loop)
    mesh.listen_for_rejoins(loop)
    provide_snapshots(server, fabric)
    logger.debug("worker %d joined %d sibling(s) over %s links", ctx.worker_index, len(mesh.links), spec.transport)
    return fabric, mesh


async def _report_routes(routes: RouteManager, path: Path) -> None:
    """The routes' state for `appliance status` (read by the supervisor, which works when this worker is
    wedged: it sees the file age): a small JSON file replaced atomically every ROUTES_REPORT_INTERVAL_S."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        while True:
            document = json.dumps({"written_wall": time.time(), "routes": routes.status_rows()})
            try:
                tmp.write_text(document)
                os.replace(tmp, path)
            except OSError as exc:
                logger.warning("cannot write the route status for appliance status to %s: %s", path, exc)
            await asyncio.sleep(ROUTES_REPORT_INTERVAL_S)
    finally:
        try:
            path.unlink()
        except OSError:
            pass


async def _heartbeat(server: Server, ctx: WorkerContext, fabric: LocalFabric | None) -> None:
    """Heartbeat while this worker does its work: a loop that stops runs no heartbeat, and a worker
    whose links from siblings are no longer drained stops heartbeating on purpose, so that `status`
    reports it late (degraded) and the supervisor restarts it rather than it answering OK for ever."""
    status = ctx.status
    stuck_reported = False
    while True:
        stuck = fabric.stuck_links(server.clock.monotonic()) if fabric is not None else []
        if stuck and not stuck_reported:
            logger.error("frames from worker(s) %s have not been taken for %ss: this worker stops heartbeating "
                         "so that the supervisor restarts it", ", ".join(map(str, stuck)), limits.LINK_STUCK_S)
        stuck_reported = bool(stuck)
        if status is not None and not stuck:
            in_msgs, in_bytes, out_msgs, out_bytes = server.totals()
            status.heartbeat()
            status.set_counters(connections=len(server.clients), msgs_in=in_msgs, msgs_out=out_msgs,
                                bytes_in=in_bytes, bytes_out=out_bytes)
            if fabric is not None:
                status.set_ring_fill(fabric.ring_fill())
            monitor = getattr(server, "jetstream_monitor", None)  # set while JetStream runs here
            status.set_damaged_assets(monitor.damaged_streams() if monitor is not None else 0)
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)


class OptionsReloader:
    """SIGHUP from the supervisor: the options it re-read and checked are in the reload file (written
    0600 next to its control socket, like the bootstrap pipe trusted as our own parent's)."""

    def __init__(self, server: Server, path: Path) -> None:
        self.server = server
        self.path = path
        self.generation = 0
        self.listeners: list[Callable[[ServerOptions], None]] = []

    def reload(self) -> None:
        try:
            with self.path.open("rb") as source:
                generation, options = pickle.load(source)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
            logger.error("cannot read the reloaded configuration from %s: %s", self.path, exc)
            return
        if not isinstance(options, ServerOptions) or not isinstance(generation, int) or generation <= self.generation:
            return
        self.generation = generation
        old = self.server.options
        if options.logging_settings() != old.logging_settings():
            setup_logging(**options.logging_settings())
        apply_reload(self.server, options)
        for listener in self.listeners:
            listener(options)
