"""A route link: one TCP connection to another server of the cluster, speaking the NATS route protocol.

Theory of operation. The connection runs the handshake of spec/cluster-and-routes.md §1 and then
hands every parsed event to its handler (server/routes.py), which owns interest and forwarding:

- accepted (the peer solicited): we send our INFO at once; the peer's CONNECT is checked (JSON, no
  `lang` — a client on the route port —, the cluster name, the route credentials when
  `cluster { authorization }` asks for them); the peer's INFO registers the route.
- solicited (we dialled a `routes` URL): the peer's INFO comes first; we answer CONNECT (our
  server id as `name`, the URL's user/password), our INFO and a PING; the peer's INFO registers.

A route is registered only on the peer's INFO, never on CONNECT alone (spec §1.2). Registration
may be refused by the handler (a route to ourselves, a duplicate, a duplicate server name): the
connection is then closed with the reason logged. Output is one buffer handed to the transport once
per turn; a transport above its high-water mark pauses the producers that fill it (the handler's
backpressure), and over `pending_bytes_max` the route is closed as a slow consumer, never silently
trimmed. PINGs go out after ROUTE_FIRST_PING_S and then every ping interval; `ping_max` unanswered
ones close the route as stale.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import bcrypt

from appliance.errors import ProtocolError
from appliance.protocol import wire
from appliance.protocol.route_parser import R_CONNECT, R_ERR, R_INFO, R_OK, R_PING, R_PONG, Event, RouteParser

logger = logging.getLogger(__name__)

ROUTE_FIRST_PING_S = 1.0  # nats-server's first route PING comes about 1 s after connect
ROUTE_WRITE_HIGH_BYTES = 1024 * 1024  # transport buffer above which producers pause
ROUTE_EARLY_EVENTS_MAX = 65_536  # operations a peer may send between its CONNECT and its INFO


@dataclass(slots=True)
class RouteSettings:
    """What a route connection needs to know of its server (filled in by server/routes.py)."""

    server_id: str
    cluster_name: str
    info: Callable[[], dict[str, object]]  # our route INFO fields
    user: str = ""  # cluster { authorization { user, password } }: what an accepted peer must send
    password: str = ""
    auth_timeout_s: float = 2.0
    ping_interval_s: float = 30.0
    ping_max: int = 2
    max_control_line: int = 4096
    max_payload: int = 1024 * 1024
    pending_bytes_max: int = 64 * 1024 * 1024
    headers: bool = True
    tls: bool = False  # cluster TLS: the CONNECT says tls_required (the handshake is done before it)
    tls_map: bool = False  # cluster tls verify_and_map: an accepted peer's certificate must name `user`
    # cluster tls verify_cert_and_check_known_urls: an accepted peer's certificate must have a DNS
    # name that is the host of one of these (the configured routes' hosts)
    check_known_urls: bool = False
    known_hosts: tuple[str, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)


def _credentials_match(settings: RouteSettings, user: object, password: object) -> bool:
    """The CONNECT's user/pass against cluster { authorization }: the password plain or bcrypt, as in
    nats-server's configs."""
    if user != settings.user or not isinstance(password, str):
        return False
    if settings.password.startswith("$2"):
        try:
            return bcrypt.checkpw(password.encode(), settings.password.encode())
        except ValueError:
            return False
    return hmac.compare_digest(password.encode(), settings.password.encode())


def dns_name_matches(dns_name: str, hosts: tuple[str, ...]) -> bool:
    """RFC 6125 6.4 as nats-server's dnsAltNameMatches: label by label, case-insensitive, a `*` only
    as the whole left-most label and matching exactly one label."""
    labels = dns_name.lower().split(".")
    for host in hosts:
        host_labels = host.lower().split(".")
        if len(host_labels) != len(labels):
            continue
        start = 1 if labels[0] == "*" else 0
        if labels[start:] == host_labels[start:]:
            return True
    return False


class RouteHandler(Protocol):
    def route_registered(self, conn: RouteConnection) -> str | None:
        """The peer's INFO arrived: None to register, else the reason to close."""
        ...

    def route_events(self, conn: RouteConnection, events: list[Event]) -> None: ...

    def route_closed(self, conn: RouteConnection, reason: str) -> None: ...

    def route_writable(self, conn: RouteConnection) -> None: ...


class RouteConnection(asyncio.Protocol):
    """One route TCP connection (either direction)."""

    def __init__(self, settings: RouteSettings, handler: RouteHandler, *, solicited: bool,
                 url_user: str = "", url_password: str = "") -> None:
        self.settings = settings
        self.handler = handler
        self.solicited = solicited
        self.url_user = url_user
        self.url_password = url_password
        self.cid = 0  # set by the handler (monitoring)
        self.configured = False  # dialled from the `routes` list (not a gossiped URL)
        self.url = ""  # the URL dialled (solicited routes)
        self.start_wall_s = time.time()
        self.last_activity_wall_s = self.start_wall_s
        self.parser = RouteParser(max_control_line=settings.max_control_line,
                                  max_payload=settings.max_payload + settings.max_control_line)
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.port = 0
        self.remote_info: dict[str, object] = {}
        self.remote_id = ""
        self.remote_name = ""
        self.connected = False  # CONNECT received (accepted side) or sent (solicited side)
        self._peer_credentials: tuple[object, object] = (None, None)  # the accepted CONNECT's user/pass (reload)
        # cluster TLS: the names the peer's certificate offers (e-mails, DNS names, URIs, subject), set
        # by the TLS layer once the handshake is done; None: no certificate seen
        self.peer_names: tuple[str, ...] | None = None
        self.peer_dns_names: tuple[str, ...] = ()  # the DNS names among them
        self.registered = False
        self.closed = False
        self.close_reason = ""
        self.paused_writing = False
        self.out = bytearray()
        self._dirty = False
        self._pings_out = 0
        self._early: list[Event] = []  # interest and messages sent between CONNECT and INFO
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.rtt_s: float | None = None
        self._ping_sent_s: float | None = None
        self.on_dirty: Callable[[RouteConnection], None] | None = None  # set by the handler

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.ip, self.port = str(peer[0]), int(peer[1])
        self.transport.set_write_buffer_limits(high=ROUTE_WRITE_HIGH_BYTES)
        loop = asyncio.get_running_loop()
        if not self.solicited:
            self.write(wire.info(self._info_for_peer()))
            self.flush()
        self._timers["auth"] = loop.call_later(self.settings.auth_timeout_s, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity_wall_s = time.time()
        events: list[Event] = []
        error: ProtocolError | None = None
        try:
            self.parser.feed(data, events)
        except ProtocolError as exc:
            error = exc
        try:
            self._handle(events)
        except Exception:  # one route's bug closes that route only
            logger.exception("route %s: error handling route data; closing the connection", self.describe())
            self.close("Internal Error")
        if error is not None and not self.closed:
            if not self.solicited and not self.connected:
                # nats-server answers anything but CONNECT first on its route port this way
                self._reject(f"protocol error before CONNECT: {error}", "Authentication Failure",
                             error="Authorization Violation")
            else:
                logger.error("route %s: protocol error: %s", self.describe(), error)
                if error.client_error:
                    self.write(wire.err(error.client_error))
                self.close(f"Protocol Violation: {error}")
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self._cleanup("Remote Closed" if exc is None else f"Read Error: {exc}")

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        if not self.closed:
            self.handler.route_writable(self)

    # --- events ----------------------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        forward: list[Event] = []
        for event in events:
            if self.closed:
                return
            op = event[0]
            if not self.solicited and not self.connected and op != R_CONNECT:
                self._reject("protocol before CONNECT", "Authentication Failure", error="Authorization Violation")
                return
            if op == R_PING:
                self.write(wire.PONG)
            elif op == R_PONG:
                self._pings_out = 0
                if self._ping_sent_s is not None:
                    self.rtt_s = asyncio.get_running_loop().time() - self._ping_sent_s
                    self._ping_sent_s = None
            elif op == R_CONNECT:
                self._on_connect(event[1])
            elif op == R_INFO:
                if forward:
                    self.handler.route_events(self, forward)
                    forward = []
                self._on_info(event[1])
            elif op == R_ERR:
                logger.error("route %s: remote error: %s", self.describe(), event[1].decode(errors="replace"))
            elif op == R_OK:
                pass
            elif not self.registered:
                if len(self._early) >= ROUTE_EARLY_EVENTS_MAX:
                    self._reject("too much route protocol before the peer's INFO", "Protocol Violation",
                                 error="Protocol Violation")
                    return
                self._early.append(event)  # handled once the peer's INFO registers the route
            else:
                forward.append(event)
        if forward and not self.closed:
            self.handler.route_events(self, forward)

    def _on_connect(self, raw: bytes) -> None:
        if self.solicited or self.connected:
            return  # nats-server ignores a CONNECT on a route it dialled, and a repeated one
        try:
            fields = json.loads(raw)
            if not isinstance(fields, dict):
                raise ValueError("CONNECT is not a JSON object")
        except (ValueError, UnicodeDecodeError):
            self._reject("malformed CONNECT", "Protocol Violation", error="Protocol Violation")
            return
        if "lang" in fields:
            self._reject("a client connected to the route port", "Client connected to route port",
                         error="attempted to connect to route port")
            return
        if fields.get("gateway"):
            self._reject("a gateway connected to the route port", "Protocol Violation",
                         error="attempted to connect to route port")
            return
        settings = self.settings
        self._peer_credentials = (fields.get("user"), fields.get("pass"))
        if not self._peer_authorized():
            self._reject("authentication error", "Authentication Failure", error="Authorization Violation")
            return
        cluster = fields.get("cluster")
        self._maybe_adopt(cluster, fields.get("cluster_dynamic"))
        if settings.cluster_name and cluster != settings.cluster_name:
            text = f'Rejecting connection, cluster name "{cluster}" does not match "{settings.cluster_name}"'
            self._reject(text, "Cluster Name Conflict", error=text)
            return
        if fields.get("name") == settings.server_id:
            self._reject("a route to ourselves", "Duplicate Route")
            return
        self.connected = True
        self._cancel("auth")

    def _on_info(self, raw: bytes) -> None:
        try:
            info = json.loads(raw)
            if not isinstance(info, dict) or not isinstance(info.get("server_id"), str):
                raise ValueError("INFO without a server_id")
        except (ValueError, UnicodeDecodeError):
            self._reject("malformed INFO", "Protocol Violation", error="Protocol Violation")
            return
        if self.registered:
            if info.get("server_id") == self.remote_id:
                self.remote_info.update(info)
            self.handler.route_events(self, [(R_INFO, info)])  # async INFO: gossip, lame duck
            return
        if not self.solicited and not self.connected:
            self._reject("INFO before CONNECT", "Protocol Violation", error="Protocol Violation")
            return
        if info.get("route_account"):
            text = f'Not possible to have a dedicated route for account "{info["route_account"]}" between those servers'
            self._reject(text, "Duplicate Route", error=text)
            return
        cluster = info.get("cluster")
        self._maybe_adopt(cluster, info.get("cluster_dynamic"))
        if self.settings.cluster_name and cluster and cluster != self.settings.cluster_name:
            text = f'Rejecting connection, cluster name "{cluster}" does not match "{self.settings.cluster_name}"'
            self._reject(text, "Cluster Name Conflict", error=text)
            return
        self.remote_info = info
        self.remote_id = str(info["server_id"])
        self.remote_name = str(info.get("server_name") or self.remote_id)
        if self.solicited:
            if self.remote_id == self.settings.server_id:
                self._reject("a route to ourselves", "Duplicate Route")
                return
            connect: dict[str, object] = {"echo": True, "verbose": False, "pedantic": False,
                                          "tls_required": self.settings.tls, "headers": self.settings.headers,
                                          "name": self.settings.server_id, "cluster": self.settings.cluster_name}
            if self.url_user:
                connect["user"] = self.url_user
                connect["pass"] = self.url_password
            self.write(b"CONNECT " + json.dumps(connect, separators=(",", ":")).encode() + b"\r\n")
            self.write(wire.info(self._info_for_peer()))
            self.connected = True
            self._cancel("auth")
        reason = self.handler.route_registered(self)
        if reason is not None:
            self._reject(reason, reason)
            return
        self.registered = True
        if self._early:
            early, self._early = self._early, []
            self.handler.route_events(self, early)
        if self.solicited:
            self.write(wire.PING)
        loop = asyncio.get_running_loop()
        self._timers["ping"] = loop.call_later(ROUTE_FIRST_PING_S, self._ping_tick)

    def recheck_credentials(self) -> None:
        """A reload changed `cluster { authorization }`: a route we accepted with credentials no longer
        valid is closed, as nats-server's reloadAuthorization (routes we dialled are the peer's to check)."""
        if self.solicited or not self.connected or self.closed:
            return
        if not self._peer_authorized():
            self._reject("authentication error after a reload", "Authentication Failure",
                         error="Authorization Violation")
            self.flush()

    def _peer_authorized(self) -> bool:
        """nats-server's isRouterAuthorized: with verify_and_map the certificate must name the cluster
        user, with verify_cert_and_check_known_urls one of its DNS names must be a configured route's
        host (either will do when both are set; the password is not asked); else the CONNECT's
        user/pass, when a user is configured."""
        settings = self.settings
        if not settings.tls_map and not settings.check_known_urls:
            return not settings.user or _credentials_match(settings, *self._peer_credentials)
        names = self.peer_names or ()
        if not names:
            logger.debug("route %s: User required in cert, no peer certificates found", self.describe())
            return False
        if settings.check_known_urls:
            for name in self.peer_dns_names:
                if dns_name_matches(name, settings.known_hosts):
                    logger.debug("route %s: Using SAN found in cert for auth [%r]", self.describe(), name)
                    return True
        if settings.tls_map and settings.user and settings.user in names:
            logger.debug("route %s: Using name found in cert for auth [%r]", self.describe(), settings.user)
            return True
        logger.debug("route %s: User in cert [%r], not found", self.describe(), names[-1])
        return False

    def _maybe_adopt(self, cluster: object, dynamic: object) -> None:
        """A server without a configured cluster name takes the name of the first peer that has one
        (nats-server's dynamic cluster name, spec §5)."""
        if not self.settings.cluster_name and isinstance(cluster, str) and cluster and not dynamic:
            logger.info("route %s: cluster name not set; adopting %r from the peer", self.describe(), cluster)
            self.settings.cluster_name = cluster

    def _info_for_peer(self) -> dict[str, object]:
        info = dict(self.settings.info())
        if self.settings.user and not self.solicited:
            info["auth_required"] = True
        return info

    def _reject(self, log_text: str, reason: str, *, error: str = "") -> None:
        logger.error("route %s: %s; closing the connection", self.describe(), log_text)
        if error:
            self.write(wire.err(error))
        self.close(reason)

    # --- output ----------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray) -> None:
        if self.closed:
            return
        self.out += data
        if not self._dirty:
            self._dirty = True
            if self.on_dirty is not None:
                self.on_dirty(self)

    def flush(self) -> None:
        self._dirty = False
        transport = self.transport
        if self.closed or transport is None or not self.out:
            return
        data, self.out = self.out, bytearray()
        transport.write(data)
        if transport.get_write_buffer_size() > self.settings.pending_bytes_max:
            logger.warning("route %s: Slow Consumer Detected: MaxPending of %d Exceeded",
                           self.describe(), self.settings.pending_bytes_max)
            self.close("Slow Consumer (Pending Bytes)", abort=True)

    def pending_bytes(self) -> int:
        if self.transport is None or self.closed:
            return 0
        return self.transport.get_write_buffer_size() + len(self.out)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    # --- timers and closing ----------------------------------------------------------------------

    def _ping_tick(self) -> None:
        if self.closed:
            return
        if self._pings_out + 1 > self.settings.ping_max:
            logger.warning("route %s: Stale Connection - Closing", self.describe())
            self.write(wire.err("Stale Connection"))
            self.flush()
            self.close("Stale Connection")
            return
        self._pings_out += 1
        loop = asyncio.get_running_loop()
        self._ping_sent_s = loop.time()
        self.write(wire.PING)
        self.flush()
        self._timers["ping"] = loop.call_later(min(self.settings.ping_interval_s, 30.0), self._ping_tick)

    def _handshake_timeout(self) -> None:
        if not self.registered and not self.closed:
            self._reject("no route handshake in time", "Authentication Timeout", error="Authentication Timeout")
            self.flush()

    def _cancel(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def describe(self) -> str:
        name = f" {self.remote_name!r}" if self.remote_name else ""
        return f"{self.ip}:{self.port}{name} ({'solicited' if self.solicited else 'accepted'})"

    def close(self, reason: str, *, abort: bool = False) -> None:
        if self.closed:
            return
        if not abort and self.out and self.transport is not None:
            self.transport.write(bytes(self.out))
        self.out.clear()
        self._cleanup(reason)
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _cleanup(self, reason: str) -> None:
        self.closed = True
        self.close_reason = reason
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.handler.route_closed(self, reason)
