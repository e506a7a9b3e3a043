"""The core NATS server of one worker: accepts clients, owns accounts and connections.

The supervisor owns the listening socket and the server identity; this object serves on the
socket it is given. Counters kept per connection are summed here for monitoring, so the hot path
never touches server-wide totals.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import random
import socket
from typing import Protocol

from appliance import NATS_PROTO, NATS_VERSION, limits
from appliance.clock import Clock, SystemClock
from appliance.config.options import ClusterOptions, ServerOptions
from appliance.config.tls import TLSOptions
from appliance.protocol import wire
from appliance.server.account_gate import AccountGate
from appliance.server.accounts import GLOBAL_ACCOUNT, Account, AccountRegistry
from appliance.server.auth import Authenticator
from appliance.server.client import ClientConnection
from appliance.server.conn_info import ClosedConnections
from appliance.server.imports import AccountImports
from appliance.server.internal import InternalClient
from appliance.server.sublist import Subscription
from appliance.server.tls import TLSLayer, TLSServing, serving_from_options
from appliance.server.websocket import WebSocketLayer, WebsocketServing
from appliance.server.websocket import serving_from_options as websocket_serving

from collections.abc import Callable

logger = logging.getLogger(__name__)


class InterestGate(Protocol):
    """Whether every sibling worker has applied the interest changes made here (PONG waits for it)."""

    def interest_synced(self) -> bool: ...

    def wait_interest_synced(self, callback: Callable[[], None]) -> None: ...


class ClusterView(Protocol):
    """The routes of this server, as monitoring needs them (server/routes.py)."""

    def route_infos(self) -> list[dict[str, object]]: ...

    def announce_lame_duck(self) -> None: ...

    def reload_tls(self, tls: TLSOptions | None) -> None: ...

    def reload(self, options: ClusterOptions) -> None: ...


class ConnectionGate(Protocol):
    """Admission against a server-wide max_connections shared by every worker (supervisor/admission.py)."""

    def admit(self, cid: int) -> bool: ...

    def release(self, cid: int) -> None: ...

JETSTREAM_API_LEVEL = 5

_M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
_M_MMAP_THRESHOLD = -3
_allocator_tuned = False


def keep_big_blocks() -> None:
    """Once per process (glibc only): the hot path's large buffers — a 256 KiB socket read, a link
    frame, a client's output — come from the heap and freed ones stay for the next, instead of a
    fresh mmap and a page fault per 4 KiB each time (measured: most of a receiving worker's CPU at
    1 KiB messages). Elsewhere a no-op."""
    global _allocator_tuned
    if _allocator_tuned:
        return
    _allocator_tuned = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, limits.ALLOCATOR_MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, limits.ALLOCATOR_TRIM_THRESHOLD_BYTES)


def no_delay(listener: socket.socket) -> None:
    """TCP_NODELAY on a listening socket: every socket it accepts inherits it (Linux), so a PONG
    never waits for a client's delayed ACK, with no system call per connection. (asyncio's
    transports set it only on sockets whose proto is IPPROTO_TCP, which a plain socket() is not.)"""
    if listener.family in (socket.AF_INET, socket.AF_INET6):
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Server:
    def __init__(self, options: ServerOptions, *, server_id: str, start_wall_s: float, clock: Clock | None = None,
                 rng: random.Random | None = None) -> None:
        self.options = options
        self.server_id = server_id
        self.server_name = options.server_name or server_id
        self.start_wall_s = start_wall_s
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.accounts = AccountRegistry(options)
        self.auth = Authenticator(options)
        self.tls: TLSServing | None = serving_from_options(options)  # this worker's own SSL context
        self.websocket: WebsocketServing | None = websocket_serving(options)  # `websocket {}`, own SSL context
        self.clients: dict[int, ClientConnection] = {}
        # the last max_closed_clients closed connections, as recorded when each closed
        self.closed_clients = ClosedConnections(options.max_closed_clients)
        self.dirty: list[ClientConnection] = []
        self.producer: ClientConnection | None = None  # the connection whose input is being handled
        self.loop: asyncio.AbstractEventLoop = asyncio.get_event_loop()
        self.total_connections = 0
        self.slow_consumers = 0
        self.stale_connections = 0
        self.lame_duck = False
        self.ready = False
        self.trace = options.trace  # -V: protocol traces (TRC lines)
        self.interest_listeners: list[Callable[[Account, Subscription, bool], None]] = []
        # a reload added or removed accounts: (added, removed), after the clients were re-checked
        self.account_listeners: list[Callable[[list[Account], list[Account]], None]] = []
        # a route to another server closed (not replaced by a duplicate): called with its server name
        # (clustered RAFT elects a new leader at once when the gone server led a group)
        self.route_down_listeners: list[Callable[[str], None]] = []
        self.interest_gate: InterestGate | None = None  # sibling workers, when there are any
        self.before_client_read: Callable[[], None] | None = None  # take sibling frames first
        self.connection_gate: ConnectionGate | None = None
        self.account_gate: AccountGate | None = None  # operator mode: accounts' `conn` limits across workers  # max_connections across workers, when there are any
        self.routes: ClusterView | None = None  # the cluster's routes, on the worker that holds them
        self.jetstream_api_routed = False  # clustered JetStream: its API interest crosses the routes
        # the voters of this server's JetStream meta group (route INFO `js_meta_voters`): a server
        # starting on an empty store that finds itself among them lost its store
        self.jetstream_meta_voters: tuple[str, ...] = ()
        # this server's JetStream store (route INFO `js_store`) and the stores its peers have had
        # (`js_peer_stores`, server name -> ids): how a server on a wiped store learns it was one
        self.jetstream_store_id = ""
        self.jetstream_peer_stores: dict[str, list[str]] = {}
        # clustered JetStream: this server's free JetStream storage and memory in bytes ({"file":
        # n, "memory": n}), carried in route INFO for the meta leader's placement
        self.jetstream_free: Callable[[], dict[str, int]] | None = None
        self.cluster_urls: list[str] = []  # the other servers' client URLs (server/cluster_urls.py)
        self._over_max_connections = False  # about the connection registered last
        # totals of closed connections, so /varz counters never go backwards
        self._retired = [0, 0, 0, 0]
        self._next_cid = 0
        self._cid_step = 1
        self._next_internal_cid = 0  # internal clients count down from -1
        # the first INFO (plain, TLS first, WebSocket) and the connect_info INFO, each with the
        # server's part encoded once while it stays the same
        self._info_lines: dict[tuple[bool, bool] | str, wire.InfoLine] = {}
        self.internal_clients: dict[int, InternalClient] = {}
        self._flush_scheduled = False
        self._listener: asyncio.base_events.Server | None = None
        self._ws_listener: asyncio.base_events.Server | None = None
        self._listen_host = options.host
        self._listen_port = options.port
        self.imports = AccountImports(self)  # stream and service imports across accounts (server/imports.py)
        self.imports.configure_from_options(options)

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, listener: socket.socket, *, cid_base: int = 0, cid_step: int = 1) -> None:
        """Serve on `listener`; client ids are cid_base + cid_step, + 2*cid_step, ... (unique per host)."""
        assert cid_step >= 1
        keep_big_blocks()
        self.loop = asyncio.get_running_loop()
        self._next_cid = cid_base
        self._cid_step = cid_step
        host, port = listener.getsockname()[:2]
        self._listen_host, self._listen_port = str(host), int(port)
        no_delay(listener)
        self._listener = await self.loop.create_server(self._new_connection, sock=listener,
                                                       backlog=limits.ACCEPT_BACKLOG)
        self.ready = True

    async def start_websocket(self, listener: socket.socket) -> None:
        """Serve WebSocket clients on `listener` (TLS first when `websocket { tls {} }`)."""
        serving = self.websocket
        assert serving is not None
        no_delay(listener)
        self._ws_listener = await self.loop.create_server(
            self._new_websocket, sock=listener, backlog=limits.ACCEPT_BACKLOG, ssl=serving.context,
            ssl_handshake_timeout=serving.handshake_timeout_s if serving.context is not None else None)

    def _new_websocket(self) -> WebSocketLayer:
        assert self.websocket is not None
        self._next_cid += self._cid_step
        return WebSocketLayer(ClientConnection(self, self._next_cid), self.websocket)

    def _new_connection(self) -> ClientConnection | TLSLayer:
        self._next_cid += self._cid_step
        conn = ClientConnection(self, self._next_cid)
        return conn if self.tls is None else TLSLayer(conn, self.tls)

    async def stop_accepting(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._ws_listener is not None:
            self._ws_listener.close()
            self._listener = None

    async def shutdown(self) -> None:
        await self.stop_accepting()
        for conn in list(self.clients.values()):
            conn.close("Server Shutdown")
        self.ready = False

    async def enter_lame_duck(self) -> None:
        """Stop accepting, tell clients (INFO ldm), then close them spread over the duration."""
        if self.lame_duck:
            return
        self.lame_duck = True
        options = self.options
        logger.info("Entering lame duck mode, stop accepting new clients")
        await self.stop_accepting()
        if self.routes is not None:
            self.routes.announce_lame_duck()  # peers drop our client URLs from their INFO
        info = self.info_fields()
        info["ldm"] = True
        for conn in list(self.clients.values()):
            if conn.protocol >= 1:
                conn.write(wire.info(info))
        self.flush_dirty()
        await asyncio.sleep(options.lame_duck_grace_period_s)
        clients = list(self.clients.values())
        spread_s = max(options.lame_duck_duration_s - options.lame_duck_grace_period_s, 0.0)
        if clients:
            logger.info("Closing existing clients")
            pause_s = spread_s / len(clients)
            for conn in clients:
                conn.close("Server Shutdown")
                if pause_s:
                    await asyncio.sleep(pause_s)

    # --- connections -----------------------------------------------------------------------------

    def register(self, conn: ClientConnection) -> None:
        """A new client connection; it may be one too many (too_many_connections, asked right after).
        nats-server still sends such a connection its INFO, then -ERR 'maximum connections exceeded'."""
        self.clients[conn.cid] = conn
        self.total_connections += 1
        conn.account.clients += 1
        gate = self.connection_gate
        if gate is None:
            self._over_max_connections = len(self.clients) > self.options.max_connections
        else:
            self._over_max_connections = not gate.admit(conn.cid)
        if self._over_max_connections and conn.transport is not None:
            conn.transport.write(self.info_bytes(conn))

    def unregister(self, conn: ClientConnection) -> None:
        if self.clients.pop(conn.cid, None) is not None:
            if self.connection_gate is not None:
                self.connection_gate.release(conn.cid)
            conn.account.clients -= 1
            retired = self._retired
            retired[0] += conn.in_msgs
            retired[1] += conn.in_bytes
            retired[2] += conn.out_msgs
            retired[3] += conn.out_bytes
            self.closed_clients.record(conn)

    def too_many_connections(self) -> bool:
        """Whether the connection registered last is over max_connections (server-wide with a gate)."""
        return self._over_max_connections

    def add_internal(self, client: InternalClient) -> int:
        """A new internal client (JetStream API, system services): its cid (negative, per worker),
        and it is listed with its subscriptions in /subsz as nats-server lists its own."""
        self._next_internal_cid -= 1
        self.internal_clients[self._next_internal_cid] = client
        return self._next_internal_cid

    def remove_internal(self, client: InternalClient) -> None:
        self.internal_clients.pop(client.cid, None)

    def schedule_flush(self) -> None:
        """Flush dirty connections on the next loop turn (for messages sent outside a client read)."""
        if not self._flush_scheduled and self.dirty:
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush_dirty()

    def flush_dirty(self) -> None:
        dirty = self.dirty
        if not dirty:
            return
        self.dirty = []
        for conn in dirty:
            conn.flush()

    def on_interest_change(self, account: Account, sub: Subscription, *, added: bool) -> None:
        for listener in self.interest_listeners:
            listener(account, sub, added)

    # --- what clients are told -------------------------------------------------------------------

    def info_fields(self) -> dict[str, object]:
        options = self.options
        fields: dict[str, object] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": NATS_VERSION,
            "proto": NATS_PROTO,
            "go": "python",
            "host": self._listen_host,
            "port": self._listen_port,
            "headers": True,
            "max_payload": options.max_payload,
        }
        if self.auth.required:
            fields["auth_required"] = True
        if self.tls is not None:
            if self.tls.allow_non_tls:
                fields["tls_available"] = True
            else:
                fields["tls_required"] = True
            if self.tls.verify:
                fields["tls_verify"] = True
        if options.jetstream.enabled:
            fields["jetstream"] = True
        if options.cluster.name:
            fields["cluster"] = options.cluster.name
        if options.jetstream.domain:
            fields["domain"] = options.jetstream.domain
        if self.cluster_urls and not options.cluster.no_advertise:
            fields["connect_urls"] = self.client_urls() + [u for u in self.cluster_urls if u not in self.client_urls()]
        return fields

    def client_urls(self) -> list[str]:
        """This server's own client URL(s) as other servers and clients are told (client_advertise, or
        the listen address when it names one host)."""
        if self.options.client_advertise:
            return [self.options.client_advertise]
        host, port = self.listen_address
        if host in ("", "0.0.0.0", "::"):
            return []
        return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]

    def set_cluster_urls(self, urls: list[str]) -> None:
        """The other servers' client URLs changed: INFO with the new connect_urls to every client that
        takes async INFO (protocol >= 1), as nats-server does when a route comes or goes."""
        if urls == self.cluster_urls:
            return
        self.cluster_urls = list(urls)
        if self.options.cluster.no_advertise:
            return
        for conn in list(self.clients.values()):
            if conn.protocol >= 1 and conn.connected and not conn.closed:
                fields = self.info_fields()
                conn.write(wire.info(fields))
        self.schedule_flush()

    def info_bytes(self, conn: ClientConnection, *, tls_first: bool = False) -> bytes:
        """The first INFO; `tls_first`: sent after a TLS-first handshake (always tls_required)."""
        fields = self.info_fields()
        if tls_first:
            fields.pop("tls_available", None)
            fields["tls_required"] = True
        if conn.websocket:  # TLS, if any, is the WebSocket port's: no upgrade inside the frames
            for name in ("tls_required", "tls_verify", "tls_available"):
                fields.pop(name, None)
            if self.auth.websocket.required:  # the WebSocket block's authorization may require it alone
                fields["auth_required"] = True
        own: dict[str, object] = {"nonce": conn.nonce} if conn.nonce else {}
        own["client_id"] = conn.cid
        own["client_ip"] = conn.ip
        own["api_lvl"] = JETSTREAM_API_LEVEL
        return self._info_line((tls_first, conn.websocket)).encode(fields, own)

    def connect_info_bytes(self, conn: ClientConnection) -> bytes:
        """The INFO sent after the first PONG to clients with protocol >= 1."""
        own: dict[str, object] = {"client_id": conn.cid, "client_ip": conn.ip, "connect_info": True,
                                  "remote_account": conn.account.name}
        if conn.account.is_system:
            own["acc_is_sys"] = True
        own["api_lvl"] = JETSTREAM_API_LEVEL
        return self._info_line("connect_info").encode(self.info_fields(), own)

    def _info_line(self, kind: tuple[bool, bool] | str) -> wire.InfoLine:
        line = self._info_lines.get(kind)
        if line is None:
            line = self._info_lines[kind] = wire.InfoLine()
        return line

    # --- monitoring totals -----------------------------------------------------------------------

    def totals(self) -> tuple[int, int, int, int]:
        in_msgs, in_bytes, out_msgs, out_bytes = self._retired
        for conn in self.clients.values():
            in_msgs += conn.in_msgs
            in_bytes += conn.in_bytes
            out_msgs += conn.out_msgs
            out_bytes += conn.out_bytes
        return in_msgs, in_bytes, out_msgs, out_bytes

    def global_account(self) -> Account:
        return self.accounts[GLOBAL_ACCOUNT]

    @property
    def listen_address(self) -> tuple[str, int]:
        return self._listen_host, self._listen_port
