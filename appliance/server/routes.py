"""Routes to the other servers of the cluster, as seen by the router of the worker that holds them.

Theory of operation. Each registered route (fabric/route.py) is a `RoutePeer`: to the router it
is one more subscriber, like a sibling worker's LinkPeer (`is_link`, so the sublist lists it once
among a subject's plain subscribers), and `deliver()` writes RMSG/HMSG lines to the route. The
peer's RS+ become subscriptions of the RoutePeer in this worker's sublists — one per plain subject,
`weight` of them per queue group so a pick among members is weighted as nats-server's — and they
are passed on to the sibling workers as if they were this worker's own interest, so a publish on
any worker reaches the route holder once (ring link) and leaves on the route once.

Interest we advertise (spec §4.1–4.2): the host's interest — this worker's subscriptions and those
of the siblings (their LinkPeer entries) — never what a route told us (no transit). Plain interest is
counted per (account, subject): RS+ on 0→1, RS- on 1→0; queue interest per (account, subject,
queue): RS+ with the member count on every change, RS- at 0. A newly registered route gets the whole
set. Subscriptions of internal clients on `$JS.API.` stay local unless JetStream is clustered
(`server.jetstream_api_routed`): a standalone JetStream per host answers only its own clients, while
every server of a clustered JetStream receives each request and one answers (jetstream/responder.py).
Only the account's interest is advertised, never `$SYS $JS.API.>` too: a Go node would deliver a
request twice (spec §6.1).

Forwarding (§4.3–4.6). Outbound: the router calls deliver() once for the plain interest of a route
and once per queue group whose pick fell on the route, one after the other for the same message;
the RoutePeer merges those into one RMSG that names the queues (`+ reply q…` / `| q…`), so a Go
peer delivers to its plain subscribers once. Inbound: a message from a route goes to local plain
subscribers and sibling links, and for each queue it names to one member that is not a route;
never to another route (one hop). A message from a sibling goes to local subscribers and routes
(links.py), never to another sibling.

Backpressure: a route above its transport high-water mark pauses the producer that fills it (a
client or a sibling link) until it drains; a peer that stops reading entirely is closed as a slow
consumer (fabric/route.py), never silently trimmed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from appliance import NATS_VERSION, limits
from appliance.config.options import ClusterOptions
from appliance.config.tls import TLSOptions
from appliance.config.tls_context import route_contexts
from appliance.fabric.route import RouteConnection, RouteSettings
from appliance.protocol import wire
from appliance.protocol.route_parser import (
    R_INFO,
    R_MSG,
    R_RUN,
    R_SUB,
    R_UNSUB,
    Event,
    append_rmsg,
    rs_minus,
    rs_plus,
)
from appliance.server.accounts import Account
from appliance.server.client import append_pub_msgs
from appliance.server.cluster_urls import CLUSTER_URLS_SUBJECT, publish_cluster_urls, urls_account
from appliance.server.internal import InternalClient
from appliance.server.links import RELAY_PREFIX, RELAY_QUEUE_PREFIX
from appliance.server.route_tls import RouteTLSLayer
from appliance.server.tls import REASON_TLS_FAILURE
from appliance.server.tls_pin import pin_failure
from appliance.server.router import pick
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.server.server import Server

logger = logging.getLogger(__name__)

DUPLICATE_ROUTE = "Duplicate Route"  # close reason of the older of two routes to one server (it lives on)
ROUTE_RECONNECT_S = 1.0  # nats-server DEFAULT_ROUTE_RECONNECT
ROUTE_RECONNECT_MAX_S = 30.0
ROUTE_QUEUE_WEIGHT_MAX = 1024  # sublist entries one route's queue group may hold (its member count beyond is capped)
ROUTE_CONNECT_TIMEOUT_S = 2.0
ROUTE_RUN_MSGS_MAX = 4096  # PUBs of one client read written as RMSGs in one call
_LOCAL_ONLY_PREFIXES = (b"$JS.API.",)  # internal interest kept off the routes (see the module docstring)

Key = tuple[bytes, bytes, bytes | None]


def parse_route_url(url: str) -> tuple[str, int, str, str]:
    """(host, port, user, password) of `nats-route://[user:pass@]host:port` (or nats://)."""
    parts = urlsplit(url if "://" in url else f"nats-route://{url}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"route URL {url!r} has no host:port")
    return parts.hostname, parts.port, parts.username or "", parts.password or ""


JS_RAFT_VERSION = "appliance/1"  # route INFO `js_raft`: a member of appliance's JetStream RAFT groups


class RoutePeer:
    """A registered route: a subscriber in this worker's sublists and the sink of RMSGs to it."""

    is_link = True
    is_route = True

    def __init__(self, manager: RouteManager, conn: RouteConnection) -> None:
        self.manager = manager
        self.conn = conn
        self.server = manager.server
        self.cid = conn.cid
        self.closed = False
        self.interest: dict[Key, list[Subscription]] = {}
        self.stalled: dict[Any, None] = {}
        self.receiving_paused = False
        self._next_sid = 0
        # the message being written: deliveries of the same message merge into one RMSG
        self._msg: tuple[bytes, bytes, bytes | None, bytes | None, bytes] | None = None
        self._msg_plain = False
        self._msg_queues: list[bytes] = []
        self._dirty = False
        self._ops: dict[str, bytes] = {}  # account -> b"RMSG <account> "

    @property
    def congested(self) -> bool:
        """The link's write buffer is over its high-water mark (senders that may drop, drop now)."""
        return self.closed or self.conn.paused_writing

    # --- as a subscriber -------------------------------------------------------------------------

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        if self.closed:
            return
        account = self.manager.account_name(sub.account)
        queue = sub.queue
        msg = self._msg
        if msg is not None:
            # the same message (the router's calls for it come one after the other; a sibling's plain
            # and queue records of one message are equal copies): one RMSG; distinct messages with equal
            # content merge only where that delivers the same (never a second plain, never a queue twice)
            same = ((msg[4] is data or msg[4] == data) and msg[1] == subject and msg[0] == account
                    and msg[2] == reply and msg[3] == header)
            if same and ((queue is None and not self._msg_plain) or (queue is not None and queue not in self._msg_queues)):
                if queue is None:
                    self._msg_plain = True
                else:
                    self._msg_queues.append(queue)
                return
            self._write_msg()
        self._msg = (account, subject, reply, header, data)
        self._msg_plain = queue is None
        self._msg_queues = [] if queue is None else [queue]
        if not self._dirty:
            self._dirty = True
            self.server.dirty.append(self)  # type: ignore[arg-type]
        if self.conn.paused_writing:
            producer = self.server.producer
            if producer is not None and producer is not self and len(self.stalled) < limits.STALLED_PRODUCERS_MAX:
                self.stalled[producer] = None
                producer.pause_for_backpressure()

    def _write_msg(self) -> None:
        msg = self._msg
        if msg is None:
            return
        self._msg = None
        account, subject, reply, header, data = msg
        conn = self.conn
        queues = self._msg_queues if not self._msg_plain or self._msg_queues else ()
        append_rmsg(conn.out, account, subject, reply, queues, -1 if header is None else len(header), data)
        conn.out_msgs += 1
        conn.out_bytes += len(data)

    def flush(self) -> None:
        self._dirty = False
        self._write_msg()
        self.conn.flush()

    def deliver_pubs(self, sub: Subscription, events: list[Event], start: int) -> tuple[int, int]:
        """A client's burst of plain PUBs on one subject for which this route is the only subscriber:
        RMSG lines for the whole run in one C call (append_pub_msgs with the RMSG op)."""
        if self.closed:
            return 0, 0
        self._write_msg()
        conn = self.conn
        op = self._ops.get(sub.account)
        if op is None:
            op = self._ops[sub.account] = b"RMSG " + self.manager.account_name(sub.account) + b" "
        count, data_bytes = append_pub_msgs(conn.out, events, start, events[start][1], b" ",
                                            ROUTE_RUN_MSGS_MAX, op)
        if count:
            conn.out_msgs += count
            conn.out_bytes += data_bytes
            if not self._dirty:
                self._dirty = True
                self.server.dirty.append(self)  # type: ignore[arg-type]
            if conn.paused_writing:
                producer = self.server.producer
                if producer is not None and producer is not self and len(self.stalled) < limits.STALLED_PRODUCERS_MAX:
                    self.stalled[producer] = None
                    producer.pause_for_backpressure()
        return count, data_bytes

    def drained(self) -> None:
        stalled, self.stalled = self.stalled, {}
        for producer in stalled:
            producer.resume_after_backpressure()

    # --- as a producer (its messages fill local subscribers) -------------------------------------

    def pause_for_backpressure(self) -> None:
        if not self.receiving_paused:
            self.receiving_paused = True
            self.conn.pause_reading()

    def resume_after_backpressure(self) -> None:
        if self.receiving_paused:
            self.receiving_paused = False
            self.conn.resume_reading()

    def write(self, data: bytes) -> None:
        """A protocol line (RS+/RS-, INFO) for the peer. It may overtake the message being gathered: a
        delivery can change interest (a max_msgs subscriber), and writing the message out here would
        split its plain and queue parts into two RMSGs, which the peer delivers to plain subscribers
        twice. Interest lines only steer what the peer sends us, so their order against our messages
        does not matter."""
        self.conn.write(data)

    # --- the peer's interest -----------------------------------------------------------------------

    def new_sub(self, account: Account, subject: bytes, queue: bytes | None) -> Subscription:
        self._next_sid += 1
        return Subscription(self, subject, queue, b"R%d" % self._next_sid, account.name)


def _note_pool_size(options: ClusterOptions) -> None:
    if options.pool_size not in (-1, 0, 3):  # 3: nats-server's default, set when not configured
        logger.info("cluster pool_size %d ignored: this server keeps one route per peer (no pooling)",
                    options.pool_size)


class RouteManager:
    """The routes of this server (held by one worker) and the host interest they are told about."""

    def __init__(self, server: Server, *, interest_sink: Callable[[Account, Subscription, bool], None] | None = None,
                 rng: random.Random | None = None) -> None:
        """`interest_sink(account, sub, added)` passes a route's interest on to the sibling workers."""
        self.server = server
        self.options = server.options.cluster
        self.interest_sink = interest_sink
        self.rng = rng or random.Random()
        self.peers: dict[str, RoutePeer] = {}  # remote server id -> its route
        self.connections: set[RouteConnection] = set()
        self.plain_refs: dict[tuple[str, bytes], int] = {}
        self.queue_refs: dict[tuple[str, bytes, bytes], int] = {}
        self._account_names: dict[str, bytes] = {}
        self._listener: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._route_tasks: dict[str, asyncio.Task[None]] = {}  # configured route URL -> its solicitor
        self._implicit: set[str] = set()  # gossiped route URLs being dialled
        self._self_urls: set[str] = set()
        self._configured = {self._address(url) for url in self.options.routes}
        self._closed = asyncio.Event()
        self._urls_client: InternalClient | None = None
        # per configured route URL: {"state": up|down|refused|self, "peer", "since_wall", "reason"} (status)
        self.url_states: dict[str, dict[str, object]] = {url: {"state": "down", "peer": "", "since_wall": time.time(),
                                                               "reason": "not connected yet"}
                                                         for url in self.options.routes}
        self.listen_host = self.options.host
        self.listen_port = self.options.port
        self._next_cid = 0
        user, password = self.options.user, self.options.password
        self.settings = RouteSettings(
            server_id=server.server_id, cluster_name=self.options.name, info=self.info, user=user,
            password=password, auth_timeout_s=self.options.auth_timeout_s,
            ping_interval_s=self.options.ping_interval_s, ping_max=self.options.ping_max,
            max_control_line=server.options.max_control_line, max_payload=server.options.max_payload,
            pending_bytes_max=server.options.max_pending, tls=self.options.tls is not None,
            tls_map=self.options.tls is not None and self.options.tls.map, known_hosts=_hosts(self.options.routes))
        # cluster TLS: this worker's own contexts (accepting, soliciting) and handshake timeout
        self._tls: tuple[ssl.SSLContext, ssl.SSLContext, float, frozenset[str]] | None = None
        self.reload_tls(self.options.tls)

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, listener: socket.socket | None) -> None:
        _note_pool_size(self.options)
        self._urls_client = InternalClient(self.server, urls_account(self.server), "cluster urls")
        for account in self.server.accounts.all():
            for sub in account.sublist.all_subscriptions():
                self.on_interest(account, sub, True)
        self.server.interest_listeners.append(self.on_interest)
        self.server.account_listeners.append(self.accounts_changed)
        loop = asyncio.get_running_loop()
        if listener is not None:
            listener.setblocking(False)
            host, port = listener.getsockname()[:2]
            self.listen_host, self.listen_port = str(host), int(port)
            self._listener = await loop.create_server(lambda: self._socket_protocol(self._new_connection(solicited=False)),
                                                      sock=listener)
        for url in self.options.routes:
            self._solicit_configured(url)

    def _solicit_configured(self, url: str) -> None:
        task = asyncio.get_running_loop().create_task(self._solicit(url, explicit=True))
        self._tasks.append(task)
        self._route_tasks[url] = task

    def set_routes(self, options: ClusterOptions) -> tuple[list[str], list[str]]:
        """A reload changed the configured routes (nats-server's routesOption): new URLs are solicited,
        removed ones stop being redialled and their solicited connection is closed (Route Removed).
        Returns (added, removed)."""
        added = [url for url in options.routes if url not in self.options.routes]
        removed = [url for url in self.options.routes if url not in options.routes]
        self.options = options
        self._configured = {self._address(url) for url in options.routes}
        self.settings.known_hosts = _hosts(options.routes)
        for url in removed:
            task = self._route_tasks.pop(url, None)
            if task is not None:
                task.cancel()
                if task in self._tasks:
                    self._tasks.remove(task)
            self.url_states.pop(url, None)
            for conn in list(self.connections):
                if conn.solicited and conn.configured and conn.url == url and not conn.closed:
                    logger.info("route %s: route removed by a configuration reload", conn.describe())
                    conn.close("Route Removed")
        for url in added:
            self.url_states[url] = {"state": "down", "peer": "", "since_wall": time.time(),
                                    "reason": "not connected yet"}
            self._solicit_configured(url)
        return added, removed

    def reload(self, options: ClusterOptions) -> None:
        """A reload changed the `cluster {}` block (server/reload_cluster.py says what each setting does)."""
        old = self.options
        if options.routes != old.routes:
            self.set_routes(options)
        self.options = options
        if options.pool_size != old.pool_size:
            _note_pool_size(options)
        settings = self.settings
        if options.name and options.name != settings.cluster_name:
            settings.cluster_name = options.name
        settings.user, settings.password = options.user, options.password
        settings.auth_timeout_s = options.auth_timeout_s
        settings.ping_interval_s, settings.ping_max = options.ping_interval_s, options.ping_max
        if (options.user, options.password) != (old.user, old.password):
            for conn in list(self.connections):
                conn.recheck_credentials()

    async def close(self) -> None:
        self._closed.set()
        if self.on_interest in self.server.interest_listeners:
            self.server.interest_listeners.remove(self.on_interest)
        if self.accounts_changed in self.server.account_listeners:
            self.server.account_listeners.remove(self.accounts_changed)
        if self._listener is not None:
            self._listener.close()
        for task in self._tasks:
            task.cancel()
        for conn in list(self.connections):
            conn.close("Server Shutdown")

    def _new_connection(self, *, solicited: bool, user: str = "", password: str = "") -> RouteConnection:
        conn = RouteConnection(self.settings, self, solicited=solicited, url_user=user, url_password=password)
        self._next_cid += 1
        conn.cid = -(1 << 29) - self._next_cid
        conn.on_dirty = self._conn_dirty
        self.connections.add(conn)
        return conn

    def _socket_protocol(self, conn: RouteConnection, host: str | None = None) -> asyncio.Protocol:
        """What the socket talks to: the route itself, or with cluster TLS a layer that does the
        handshake first (`host`: we dial, and check the peer's certificate against it)."""
        if self._tls is None:
            return conn
        accepting, soliciting, timeout_s, pinned = self._tls
        if host is None:
            return RouteTLSLayer(conn, accepting, timeout_s, pinned=pinned)
        return RouteTLSLayer(conn, soliciting, timeout_s, server_hostname=host, pinned=pinned)

    def reload_tls(self, tls: TLSOptions | None) -> None:
        """New route certificates (start, and SIGHUP): routes made from now on use them; routes up
        keep the session they verified. Turning route TLS on or off is refused by the reload."""
        if tls is None:
            self._tls = None
            return
        self.settings.tls_map, self.settings.check_known_urls = tls.map, tls.check_known_urls
        accepting, soliciting = route_contexts(tls)
        pinned_before = self._tls[3] if self._tls is not None else frozenset()
        self._tls = (accepting, soliciting, tls.timeout_s, tls.pinned_certs)
        if tls.pinned_certs != pinned_before:
            self._close_unpinned(tls.pinned_certs)

    def _close_unpinned(self, pinned: frozenset[str]) -> None:
        """New cluster tls `pinned_certs`: routes whose peer certificate they leave out close, as
        nats-server's recheckPinnedCerts does on reload."""
        unpinned = [conn for conn in self.connections
                    if isinstance(conn.transport, RouteTLSLayer) and not conn.closed
                    and pin_failure(pinned, conn.transport.peer_certificate()) is not None]
        if unpinned:
            logger.info("Disconnect %d clients due to pinned certs reload", len(unpinned))
            for conn in unpinned:
                conn.close(REASON_TLS_FAILURE)

    def _conn_dirty(self, conn: RouteConnection) -> None:
        peer = self.peers.get(conn.remote_id)
        target = peer if peer is not None and peer.conn is conn else conn
        self.server.dirty.append(target)  # type: ignore[arg-type]
        self.server.schedule_flush()

    def info(self) -> dict[str, object]:
        """Our route INFO (spec §1.1): no route_pool_size, no compression, no lnoc, proto 1."""
        server = self.server
        fields: dict[str, object] = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": NATS_VERSION,
            "proto": 1,
            "host": self.listen_host,
            "port": self.listen_port,
            "headers": True,
        }
        if self.options.tls is not None:  # as nats-server: routes with TLS are always mutually verified
            fields["tls_required"] = True
            fields["tls_verify"] = True
        fields["max_payload"] = server.options.max_payload
        if server.options.jetstream.enabled:
            fields["jetstream"] = True
            # our clustered JetStream (cluster/meta_driver.py): this server takes part in the
            # appliance RAFT groups, with these placement tags (Go nodes ignore unknown fields)
            fields["js_raft"] = JS_RAFT_VERSION
            if server.jetstream_free is not None:
                fields["js_free"] = server.jetstream_free()
            if server.options.server_tags:
                fields["tags"] = list(server.options.server_tags)
            if server.jetstream_meta_voters:
                fields["js_meta_voters"] = list(server.jetstream_meta_voters)
            if server.jetstream_store_id:
                fields["js_store"] = server.jetstream_store_id
            if server.jetstream_peer_stores:
                fields["js_peer_stores"] = {name: list(ids) for name, ids in server.jetstream_peer_stores.items()}
        if self.settings.cluster_name:
            fields["cluster"] = self.settings.cluster_name
        if self.options.advertise:
            fields["ip"] = f"nats-route://{self.options.advertise}/"
        urls = server.client_urls()
        if urls and not self.options.no_advertise:  # as nats-server: its peers' clients never hear of it
            fields["connect_urls"] = urls
        if server.lame_duck:
            fields["ldm"] = True
        return fields

    def _urls_changed(self) -> None:
        """Tell this worker's clients and the sibling workers the cluster's client URLs (cluster_urls.py)."""
        own = self.server.client_urls()
        urls = [url for url in self.cluster_connect_urls() if url not in own]
        self.server.set_cluster_urls(urls)
        if self._urls_client is not None:
            publish_cluster_urls(self._urls_client, urls)

    def cluster_connect_urls(self) -> list[str]:
        """The client URLs of the other servers of the cluster (for client INFO connect_urls)."""
        urls: list[str] = []
        for peer in self.peers.values():
            info = peer.conn.remote_info
            if info.get("ldm"):
                continue
            for url in info.get("connect_urls") or ():
                if isinstance(url, str) and url not in urls:
                    urls.append(url)
        return urls

    # --- soliciting ------------------------------------------------------------------------------

    async def _solicit(self, url: str, *, explicit: bool) -> None:
        """Keep a route to `url`: explicit routes forever (1 s, backing off to 30 s while the peer is
        unreachable); implicit (gossiped) ones up to connect_retries failed attempts."""
        loop = asyncio.get_running_loop()
        try:
            host, port, user, password = parse_route_url(url)
        except ValueError as exc:
            logger.error("route %s: %s", url, exc)
            return
        delay = ROUTE_RECONNECT_S
        failures = 0
        remote_id = ""
        while not self._closed.is_set():
            if remote_id and remote_id in self.peers:
                if explicit:
                    self._set_url_state(url, "up", self.peers[remote_id].conn.remote_name, "")
                failures = 0
                delay = ROUTE_RECONNECT_S
                await asyncio.sleep(0.1)  # connected to that server over another connection
                continue
            conn = self._new_connection(solicited=True, user=user, password=password)
            conn.configured = explicit
            conn.url = url
            try:
                await asyncio.wait_for(loop.create_connection(lambda: self._socket_protocol(conn, host), host, port),
                                       ROUTE_CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                self.connections.discard(conn)
                if explicit:
                    self._set_url_state(url, "down", "", f"error trying to connect: {exc}")
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    logger.info("route %s: error trying to connect: %s", url, exc)
                if not explicit and failures > self.options.connect_retries:
                    logger.info("route %s: giving up on an implicit route after %d attempts", url, failures)
                    self._implicit.discard(self._address(url))
                    return
                await asyncio.sleep(delay * (0.9 + 0.2 * self.rng.random()))
                delay = min(delay * 2, ROUTE_RECONNECT_MAX_S)
                continue
            while not conn.closed:
                await asyncio.sleep(0.05)
            remote_id = conn.remote_id or remote_id
            if explicit and not (remote_id and remote_id in self.peers):
                state = "self" if conn.close_reason == "Self Route" else "down" if conn.registered else "refused"
                self._set_url_state(url, state, conn.remote_name, conn.close_reason)
            if conn.close_reason == "Self Route":
                if url not in self._self_urls:
                    self._self_urls.add(url)
                    logger.info("route %s: it is this server; ignoring it", url)
                return
            if conn.registered:
                failures = 0
                delay = ROUTE_RECONNECT_S
                await asyncio.sleep(ROUTE_RECONNECT_S * (0.5 + 0.5 * self.rng.random()))
                continue
            # refused (cluster name, credentials, duplicate name): back off as for an unreachable peer
            failures += 1
            if not explicit and failures > self.options.connect_retries:
                self._implicit.discard(self._address(url))
                return
            await asyncio.sleep(delay * (0.9 + 0.2 * self.rng.random()))
            delay = min(delay * 2, ROUTE_RECONNECT_MAX_S)

    def _set_url_state(self, url: str, state: str, peer: str, reason: str) -> None:
        current = self.url_states.get(url)
        if current is not None and current["state"] == state and current["reason"] == reason:
            return
        self.url_states[url] = {"state": state, "peer": peer or (current or {}).get("peer", ""),
                                "since_wall": time.time() if current is None or current["state"] != state
                                else current["since_wall"], "reason": reason}

    def status_rows(self) -> list[dict[str, object]]:
        """The routes for `appliance status`: each configured URL with its state, and every other
        registered route (accepted, or dialled from gossip)."""
        rows: list[dict[str, object]] = []
        shown: set[str] = set()
        by_name = {peer.conn.remote_name: peer for peer in self.peers.values()}
        for url, state in self.url_states.items():
            peer = by_name.get(str(state["peer"])) if state["state"] == "up" else None
            if peer is not None:
                shown.add(peer.conn.remote_id)
            rows.append({"url": url, "configured": True, "peer": state["peer"], "state": state["state"],
                         "since_wall": state["since_wall"], "reason": state["reason"],
                         "rtt_ms": None if peer is None or peer.conn.rtt_s is None else round(peer.conn.rtt_s * 1000, 3)})
        for remote_id, peer in self.peers.items():
            if remote_id in shown:
                continue
            conn = peer.conn
            rows.append({"url": f"{conn.ip}:{conn.port}", "configured": False, "peer": conn.remote_name,
                         "state": "up", "since_wall": conn.start_wall_s, "reason": "",
                         "rtt_ms": None if conn.rtt_s is None else round(conn.rtt_s * 1000, 3)})
        return rows

    # --- RouteHandler ----------------------------------------------------------------------------

    def route_registered(self, conn: RouteConnection) -> str | None:
        server = self.server
        remote_id = conn.remote_id
        if remote_id == server.server_id:
            return "Self Route"
        if conn.remote_name == server.server_name:
            logger.error("route %s: remote server has a duplicate name: %r", conn.describe(), conn.remote_name)
            return "Duplicate Server Name"
        existing = self.peers.get(remote_id)
        if existing is not None:
            if self._solicitor(conn) < self._solicitor(existing.conn):
                logger.info("route %s: duplicate route to %s; keeping this one", conn.describe(), remote_id)
                existing.conn.close(DUPLICATE_ROUTE)
            else:
                logger.info("route %s: detected duplicate remote route %s", conn.describe(), remote_id)
                return DUPLICATE_ROUTE
        peer = RoutePeer(self, conn)
        self.peers[remote_id] = peer
        if conn.configured and conn.url in self.url_states:
            self._set_url_state(conn.url, "up", conn.remote_name, "")
        logger.info("route %s: route connection created (%s)", conn.describe(), remote_id)
        self._send_all_interest(peer)
        self._gossip(peer)
        self._urls_changed()
        return None

    @staticmethod
    def _address(url: str) -> str:
        try:
            host, port, _, _ = parse_route_url(url)
        except ValueError:
            return url
        return f"{host}:{port}"

    def _solicitor(self, conn: RouteConnection) -> str:
        return self.server.server_id if conn.solicited else conn.remote_id

    def route_closed(self, conn: RouteConnection, reason: str) -> None:
        self.connections.discard(conn)
        peer = self.peers.get(conn.remote_id)
        if peer is None or peer.conn is not conn:
            return
        del self.peers[conn.remote_id]
        peer.closed = True
        logger.info("route %s: route connection closed: %s", conn.describe(), reason)
        self._forget_interest(peer)
        peer.drained()
        self._urls_changed()
        if reason != DUPLICATE_ROUTE and conn.remote_name:
            for listener in list(self.server.route_down_listeners):
                listener(conn.remote_name)

    def route_writable(self, conn: RouteConnection) -> None:
        peer = self.peers.get(conn.remote_id)
        if peer is not None and peer.conn is conn:
            peer.drained()

    def route_events(self, conn: RouteConnection, events: list[Event]) -> None:
        peer = self.peers.get(conn.remote_id)
        if peer is None or peer.conn is not conn:
            return
        server = self.server
        previous = server.producer
        server.producer = peer  # type: ignore[assignment]
        try:
            for event in events:
                op = event[0]
                if op == R_RUN:
                    self._deliver_run(conn, event[1], event[2])
                elif op == R_MSG:
                    conn.in_msgs += 1
                    conn.in_bytes += len(event[6])
                    self._deliver_inbound(event[1], event[2], event[3], event[4], event[5], event[6])
                elif op == R_SUB:
                    self._add_interest(peer, event[1], event[2], event[3], event[4])
                elif op == R_UNSUB:
                    self._remove_interest(peer, event[1], event[2], event[3])
                elif op == R_INFO:
                    self._on_async_info(peer, event[1])
        finally:
            server.flush_dirty()
            server.producer = previous

    # --- inbound ---------------------------------------------------------------------------------

    def _deliver_run(self, conn: RouteConnection, account_name: bytes, msgs: list[Event]) -> None:
        """The receiving hot path: plain messages of one account, as client PUB events. Each stretch with
        one subject is matched once and handed to each local plain subscriber as a burst (deliver_pubs:
        one C call for a client, link records for a sibling); what a subscriber declines (permissions,
        max_msgs) goes message by message. Routes are skipped (one hop)."""
        count = len(msgs)
        conn.in_msgs += count
        conn.in_bytes += sum(len(m[3]) for m in msgs)
        account = self.server.accounts.get(account_name.decode(errors="replace"))
        if account is None:
            return
        sublist = account.sublist
        i = 0
        while i < count:
            subject = msgs[i][1]
            end = i + 1
            while end < count and msgs[end][1] == subject:
                end += 1
            result = sublist.cache.get(subject)
            if result is None:
                result = sublist.match(subject)
            for sub in result[0]:
                target = sub.conn
                if target.is_link and target.is_route:
                    continue
                done = i
                deliver_pubs = getattr(target, "deliver_pubs", None)
                while deliver_pubs is not None and done < end:
                    taken, _ = deliver_pubs(sub, msgs, done)
                    if not taken:
                        break
                    done += taken
                for _, _, reply, data in msgs[done:end]:
                    target.deliver(sub, subject, reply, None, data)
            i = end

    def _deliver_inbound(self, account_name: bytes, subject: bytes, reply: bytes | None, queues: tuple[bytes, ...],
                         header: bytes | None, data: bytes) -> None:
        """One hop: local subscribers and sibling links, never another route (spec §4.5)."""
        account = self.server.accounts.get(account_name.decode(errors="replace"))
        if account is None:
            return
        sublist = account.sublist
        result = sublist.cache.get(subject)
        if result is None:
            result = sublist.match(subject)
        plain, groups = result
        client_subject, client_reply = subject, reply
        sibling_subject = subject  # what a sibling worker is sent the message on
        if reply is not None and reply.startswith(b"$JS.ACK.") and b"@" in reply:
            ack, _, original = reply.rpartition(b"@")  # spec §4.4: a delivery from a remote consumer
            if original:
                client_subject, client_reply = original, ack
                sibling_subject = RELAY_PREFIX + subject  # its relay gives its clients the same
        for sub in plain:
            conn = sub.conn
            if conn.is_link:
                if not conn.is_route:
                    conn.deliver(sub, sibling_subject, reply, header, data)
                continue
            conn.deliver(sub, client_subject, client_reply, header, data)
        if not queues:
            return
        for members in groups:
            if members[0].queue not in queues:
                continue
            local = tuple(m for m in members if not (m.conn.is_link and m.conn.is_route))
            if not local:
                continue
            chosen = pick(local, None, True, self.server.rng)
            if chosen is not None:
                if chosen.conn.is_link and sibling_subject is not subject:  # relayed to one member there
                    carrier = Subscription(chosen.conn, chosen.subject, None, b"", chosen.account)
                    chosen.conn.deliver(carrier, RELAY_QUEUE_PREFIX + subject, reply + b"@" + chosen.queue,
                                        header, data)
                elif chosen.conn.is_link:
                    chosen.conn.deliver(chosen, subject, reply, header, data)
                else:
                    chosen.conn.deliver(chosen, client_subject, client_reply, header, data)

    def _add_interest(self, peer: RoutePeer, account_name: bytes, subject: bytes, queue: bytes | None,
                      weight: int) -> None:
        account = self.server.accounts.get(account_name.decode(errors="replace"))
        if account is None:
            logger.debug("route %s: unknown account %r for remote subject", peer.conn.describe(), account_name)
            return
        key = (account_name, subject, queue)
        subs = peer.interest.setdefault(key, [])
        want = 1 if queue is None else min(weight, ROUTE_QUEUE_WEIGHT_MAX)
        while len(subs) < want:
            sub = peer.new_sub(account, subject, queue)
            subs.append(sub)
            account.sublist.insert(sub)
            self._tell_siblings(account, sub, True)
        while len(subs) > want:
            sub = subs.pop()
            account.sublist.remove(sub)
            self._tell_siblings(account, sub, False)

    def _remove_interest(self, peer: RoutePeer, account_name: bytes, subject: bytes, queue: bytes | None) -> None:
        subs = peer.interest.pop((account_name, subject, queue), None)
        account = self.server.accounts.get(account_name.decode(errors="replace"))
        if not subs or account is None:
            return
        for sub in subs:
            account.sublist.remove(sub)
            self._tell_siblings(account, sub, False)

    def _forget_interest(self, peer: RoutePeer) -> None:
        for (account_name, subject, queue) in list(peer.interest):
            self._remove_interest(peer, account_name, subject, queue)

    def accounts_changed(self, added: list[Account], removed: list[Account]) -> None:
        """A reload removed accounts: the peers are told this server's interest in them is gone (RS-),
        what the routes told of them is dropped, and later news of the old account objects is ignored
        (on_interest). An added account's interest goes out as its subscriptions come."""
        for account in removed:
            name = account.name
            for key in [key for key in self.plain_refs if key[0] == name]:
                del self.plain_refs[key]
                self._broadcast(rs_minus(self.account_name(name), key[1]))
            for qkey in [qkey for qkey in self.queue_refs if qkey[0] == name]:
                del self.queue_refs[qkey]
                self._broadcast(rs_minus(self.account_name(name), qkey[1], qkey[2]))
            encoded = self.account_name(name)
            for peer in self.peers.values():
                for key in [key for key in peer.interest if key[0] == encoded]:
                    for sub in peer.interest.pop(key):
                        self._tell_siblings(account, sub, False)

    def _tell_siblings(self, account: Account, sub: Subscription, added: bool) -> None:
        if self.interest_sink is not None:
            self.interest_sink(account, sub, added)

    def _on_async_info(self, peer: RoutePeer, info: dict[str, object]) -> None:
        remote_id = info.get("server_id")
        if remote_id == peer.conn.remote_id:
            self._urls_changed()  # lame duck, updated connect_urls (the connection keeps them in remote_info)
            return
        url = info.get("ip")
        if not isinstance(url, str) or not isinstance(remote_id, str) or remote_id == self.server.server_id:
            return
        address = self._address(url)
        if remote_id in self.peers or address in self._implicit or address in self._configured:
            return
        logger.info("route: gossip from %s names %s at %s; connecting", peer.conn.describe(), remote_id, url)
        self._implicit.add(address)
        self._tasks.append(asyncio.get_running_loop().create_task(self._solicit(url, explicit=False)))

    def _gossip(self, new: RoutePeer) -> None:
        """Tell the other routes about the new one (spec §5), so a partial routes list becomes a mesh."""
        info = dict(new.conn.remote_info)
        host = str(info.get("host") or new.conn.ip)
        if host in ("", "0.0.0.0", "::"):
            host = new.conn.ip
        port = info.get("port")
        if not isinstance(port, int) or port <= 0:
            return
        info.setdefault("ip", f"nats-route://{host}:{port}/")
        info["gossip_mode"] = 1
        line = wire.info(info)
        for peer in self.peers.values():
            if peer is not new:
                peer.write(line)
        self.server.schedule_flush()

    # --- outbound interest (the host's) -----------------------------------------------------------

    def account_name(self, name: str) -> bytes:
        encoded = self._account_names.get(name)
        if encoded is None:
            encoded = self._account_names[name] = name.encode()
        return encoded

    def advertised(self, sub: Subscription) -> bool:
        conn = sub.conn
        if sub.subject == CLUSTER_URLS_SUBJECT:
            return False  # host-local (cluster_urls.py), whoever subscribes
        if conn.is_link:
            return not conn.is_route
        if (sub.subject.startswith(_LOCAL_ONLY_PREFIXES) and getattr(conn, "connected", None) is None
                and not self.server.jetstream_api_routed):
            return False  # an internal client's JetStream API subscription (see the module docstring)
        return True

    def on_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        """A subscription of the host (this worker's or a sibling's) came or went."""
        if self.server.accounts.get(account.name) is not account:
            return  # an account removed by a reload (accounts_changed told the peers)
        if not self.advertised(sub):
            if added and sub.subject == CLUSTER_URLS_SUBJECT and sub.conn.is_link and self._urls_client is not None:
                publish_cluster_urls(self._urls_client, self.server.cluster_urls)  # a sibling (re)started
            return
        name = account.name
        if sub.queue is None:
            pkey = (name, sub.subject)
            count = self.plain_refs.get(pkey, 0) + (1 if added else -1)
            if count > 0:
                self.plain_refs[pkey] = count
            else:
                self.plain_refs.pop(pkey, None)
            if added and count == 1:
                self._broadcast(rs_plus(self.account_name(name), sub.subject))
            elif not added and count == 0:
                self._broadcast(rs_minus(self.account_name(name), sub.subject))
            return
        qkey = (name, sub.subject, sub.queue)
        count = self.queue_refs.get(qkey, 0) + (1 if added else -1)
        if count > 0:
            self.queue_refs[qkey] = count
            self._broadcast(rs_plus(self.account_name(name), sub.subject, sub.queue, count))
        else:
            self.queue_refs.pop(qkey, None)
            self._broadcast(rs_minus(self.account_name(name), sub.subject, sub.queue))

    def _broadcast(self, line: bytes) -> None:
        if not self.peers:
            return
        for peer in self.peers.values():
            peer.write(line)
        self.server.schedule_flush()

    def _send_all_interest(self, peer: RoutePeer) -> None:
        out = bytearray()
        for (name, subject) in self.plain_refs:
            out += rs_plus(self.account_name(name), subject)
        for (name, subject, queue), count in self.queue_refs.items():
            out += rs_plus(self.account_name(name), subject, queue, count)
        if out:
            peer.write(bytes(out))

    def announce_info_to_appliance_peers(self) -> None:
        """An async INFO to the routes of appliance JetStream servers (a changed `js_free`, or the
        meta group's voters `js_meta_voters`): they keep it in the route's remote_info (Go nodes
        are not told: nothing there reads it)."""
        line = wire.info(self.info())
        sent = False
        for peer in self.peers.values():
            if peer.conn.remote_info.get("js_raft") == JS_RAFT_VERSION:
                peer.write(line)
                sent = True
        if sent:
            self.server.schedule_flush()

    def announce_lame_duck(self) -> None:
        """An async INFO with `ldm` to every route (spec §7): peers stop offering our client URLs."""
        self._broadcast(wire.info(self.info()))

    # --- monitoring ------------------------------------------------------------------------------

    def route_infos(self) -> list[dict[str, object]]:
        """One row per registered route, the fields of monitor/view.py RouteInfo."""
        rows = []
        for peer in self.peers.values():
            conn = peer.conn
            interest = tuple(subject.decode(errors="replace") if queue is None
                             else f"{subject.decode(errors='replace')} {queue.decode(errors='replace')}"
                             for (_, subject, queue) in peer.interest)
            rows.append({
                "rid": -conn.cid - (1 << 29),
                "remote_id": conn.remote_id,
                "remote_name": conn.remote_name,
                "did_solicit": conn.solicited,
                "is_configured": conn.solicited and conn.configured,
                "ip": conn.ip,
                "port": conn.port,
                "start_wall_s": conn.start_wall_s,
                "last_activity_wall_s": conn.last_activity_wall_s,
                "rtt_s": conn.rtt_s,
                "pending_size": conn.pending_bytes(),
                "in_msgs": conn.in_msgs,
                "out_msgs": conn.out_msgs,
                "in_bytes": conn.in_bytes,
                "out_bytes": conn.out_bytes,
                "subscriptions": interest,
            })
        return rows


def _hosts(routes: list[str]) -> tuple[str, ...]:
    """The host names of the configured route URLs (what verify_cert_and_check_known_urls knows)."""
    return tuple(host for host in (urlsplit(url).hostname for url in routes) if host)
