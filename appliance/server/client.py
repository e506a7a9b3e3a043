"""One client connection: asyncio protocol glue around the sans-I/O parser, plus the router's
hot path (PUB → match → MSG into each subscriber's outbound buffer).

Theory of operation: `data_received` parses everything the read brought, handles the events in
order and appends deliveries to subscribers' outbound bytearrays; the server flushes every dirty
connection once at the end of the read (writes coalesced per read, not per message). An
outbound buffer over `max_pending` makes the subscriber a slow consumer (closed, as nats-server);
over 3/4 of it the producing connection stops reading until the subscriber drains (backpressure,
never a silent drop). An exception while handling one connection closes that connection only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
from typing import TYPE_CHECKING, Any

from appliance import limits
from appliance.errors import ProtocolError
from appliance import native
from appliance.log import TRACE
from appliance.protocol import wire
from appliance.protocol.client_parser import (
    ERR_MAX_PAYLOAD,
    OP_CONNECT,
    OP_HPUB,
    OP_INFO,
    OP_OK,
    OP_PING,
    OP_PONG,
    OP_PUB,
    OP_SUB,
    OP_UNSUB,
    ClientParser,
    Event,
)
from appliance.protocol.subjects import is_valid_publish_subject, is_valid_subject
from appliance.config.nkey import new_nonce
from appliance.config.tls_context import cipher_name, version_name
from appliance.server import auth, tls
from appliance.server import jwt_auth
from appliance.server.jwt_auth import JWTUser
from appliance.server.accounts import GLOBAL_ACCOUNT, Account
from appliance.server.links import append_msgs
from appliance.server.router import pick, route
from appliance.server.sublist import Subscription
from appliance.server.tls_map import PeerIdentity, identity_from_cert

if TYPE_CHECKING:
    from appliance.server.server import Server

logger = logging.getLogger(__name__)
_TRACE_NAMES = {OP_PING: b"PING", OP_PONG: b"PONG", OP_INFO: b"INFO", OP_OK: b"+OK"}

append_msg = native.speedups.append_msg if native.ENABLED else wire.append_msg


def append_pub_msgs_py(out: bytearray, events: list[Event], start: int, subject: bytes, tail: bytes,
                       limit: int, op: bytes = b"MSG ") -> tuple[int, int]:
    """A MSG per plain PUB event (op 1) from events[start] on while the subject stays `subject`, at
    most `limit`: a burst for one local subscriber (or, with op b"RMSG <account> " and tail b" ", for
    a route). Returns (events used, payload bytes). Twin of the native append_pub_msgs."""
    count = 0
    data_bytes = 0
    for event in events[start:]:
        if count >= limit or len(event) != 4 or event[0] != OP_PUB or event[1] != subject:
            break
        reply = event[2]
        out += op
        out += subject
        out += tail
        if reply:
            out += reply
            out += b" "
        out += b"%d\r\n%s\r\n" % (len(event[3]), event[3])
        count += 1
        data_bytes += len(event[3])
    return count, data_bytes


def count_pubs_py(events: list[Event], start: int, subject: bytes, with_reply: bool) -> tuple[int, int]:
    """The plain PUB events from events[start] on while the subject stays `subject` (and, unless
    with_reply, while they carry no reply subject): a burst nobody subscribed to. Returns (events,
    payload bytes). Twin of the native count_pubs."""
    count = 0
    data_bytes = 0
    for event in events[start:]:
        if len(event) != 4 or event[0] != OP_PUB or event[1] != subject or (event[2] is not None and not with_reply):
            break
        count += 1
        data_bytes += len(event[3])
    return count, data_bytes


append_pub_msgs = native.speedups.append_pub_msgs if native.ENABLED else append_pub_msgs_py
count_pubs = native.speedups.count_pubs if native.ENABLED else count_pubs_py

ERR_AUTH_VIOLATION = "Authorization Violation"
ERR_AUTH_TIMEOUT = "Authentication Timeout"
ERR_AUTH_EXPIRED = "User Authentication Expired"
ERR_AUTH_REVOKED = "User Authentication Revoked"
ERR_ACCOUNT_EXPIRED = "Account Authentication Expired"
ERR_ACCOUNT_CONNECTIONS = "maximum account active connections exceeded"
ERR_STALE = "Stale Connection"
ERR_INVALID_SUBJECT = "Invalid Subject"
ERR_INVALID_PUB_SUBJECT = "Invalid Publish Subject"
ERR_MAX_SUBS = "maximum subscriptions exceeded"
ERR_NO_RESPONDERS_HEADERS = "no responders requires headers support"


class ClientConnection(asyncio.Protocol):
    is_link = False  # a subscriber here, not a sibling worker (see server/links.py)

    def __init__(self, server: Server, cid: int) -> None:
        self.server = server
        self.cid = cid
        self.transport: asyncio.Transport | None = None
        options = server.options
        self.parser = ClientParser(max_control_line=options.max_control_line, max_payload=options.max_payload)
        self.account: Account = server.accounts[GLOBAL_ACCOUNT]
        self.subs: dict[bytes, Subscription] = {}
        self.perms: auth.ClientPermissions | None = None
        self.user = ""
        self.jwt_user: JWTUser | None = None  # operator mode: who the user JWT made this client
        self.max_subs = -1  # a user JWT's (and its account's) subscription limit; -1: the server's
        self._payload_cut = 0  # a user JWT's payload limit, still to check on PUBs parsed before it
        self._credentials: dict[str, object] = {}  # CONNECT's user/pass/auth_token: re-checked on reload
        self._checked_hash = ""  # the bcrypt hash the password was verified against (not redone on reload)
        self._bound_as: tuple[str, str] | None = None  # ("nkey"|"user", key) it was let in as (reload)
        # CONNECT options, with nats-server's defaults for absent keys
        self.connected = False
        self.verbose = True
        self.pedantic = True
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.protocol = 0
        self.name = ""
        self.lang = ""
        self.version = ""
        self.pongs_seen = 0
        # counters and times (wall seconds for monitoring)
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.start_wall_s = server.clock.wall()
        self.last_activity_wall_s = self.start_wall_s
        self.last_in_s = server.clock.monotonic()
        self.rtt_s = 0.0
        self.ip = ""
        self.port = 0
        self.close_reason = ""
        self.stop_wall_s = 0.0
        # TLS (server/tls.py): set once the handshake is done
        self.tls_version = ""
        self.tls_cipher_suite = ""
        self.tls_first = False
        self.peer_identity: PeerIdentity | None = None
        self.websocket = False  # framed by server/websocket.py (its own port, its own TLS)
        self.cookies: dict[str, str] = {}  # WebSocket: CONNECT field -> a cookie's value, used when CONNECT has none
        self.nonce = new_nonce() if server.auth.nonce_required else ""  # signed by NKey users
        self.closed = False
        # output and flow control
        self._out = bytearray()
        self._dirty = False
        self._paused_reading = False
        self._holding = False  # a bcrypt check or an interest sync is pending; events wait in _held
        self._pongs_owed = 0  # PINGs of this read not answered yet (only with sibling workers)
        self._pong_deferred = False  # owed PONGs wait for one more read (_settle_pongs)
        self._read_once = False  # the first read waits for the interest sync (_hold_first_read)
        self._fd: int | None = None  # the socket's fd (-1: none), to see whether more input is already waiting
        self._held: list[Event] = []
        self._stalled_producers: dict[ClientConnection, None] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._pings_out = 0
        self._ping_sent_s = 0.0  # when the last server PING left (nats-server's rttStart)
        self._ping_due_s = 0.0  # loop time the first PING is due, when later than its timer
        self._accepted_s = self.server.clock.monotonic()

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # TCP_NODELAY is on already: accepted sockets inherit it from the listener (Server.start)
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.ip, self.port = str(peer[0]), int(peer[1])
        transport.set_write_buffer_limits(high=limits.WRITE_BUFFER_HIGH_BYTES)
        self.server.register(self)
        if self.server.too_many_connections():
            self.close_over_max_connections()
            return
        logger.debug("%s:%d - cid:%d - Client connection created", self.ip, self.port, self.cid)
        serving = self.server.tls if not self.websocket else None
        if serving is not None:  # INFO (unless TLS first), then the handshake; timers once it is done
            layer: tls.TLSLayer = transport  # type: ignore[assignment]  # server/tls.py wraps the socket
            layer.begin_handshake(self.server.info_bytes(self, tls_first=serving.handshake_first))
            return
        transport.write(self.server.info_bytes(self))
        self._start_timers()

    def tls_established(self, secure: tls.TLSLayer, *, first: bool) -> None:
        """The handshake of server/tls.py is done: what is written from now on is encrypted."""
        ssl_object = secure.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.tls_version = version_name(ssl_object)
            self.tls_cipher_suite = cipher_name(ssl_object)
            cert = ssl_object.getpeercert()
            if cert:
                self.peer_identity = identity_from_cert(cert)
        self.tls_first = first
        if first:
            secure.write(self.server.info_bytes(self, tls_first=True))
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s:%d - cid:%d - TLS handshake complete", self.ip, self.port, self.cid)
            logger.debug("%s:%d - cid:%d - TLS version %s, cipher suite %s", self.ip, self.port, self.cid,
                         self.tls_version, self.tls_cipher_suite)
        self._start_timers()

    def tls_skipped(self) -> None:
        """allow_non_tls: this client speaks plain text (server/tls.py passes its bytes through)."""
        self._start_timers()

    def _start_timers(self) -> None:
        loop = self.server.loop
        port = self.server.auth.port(self.websocket)
        if port.required:
            self._timers["auth"] = loop.call_later(port.timeout_s, self._auth_timeout)
        self._start_first_ping()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        before = self.server.before_client_read
        if before is not None:
            before()
        self.last_in_s = self.server.clock.monotonic()
        events: list[Event] = []
        error: ProtocolError | None = None
        try:
            self.parser.feed(data, events)
        except ProtocolError as exc:
            error = exc
        server = self.server
        if server.trace:
            self._trace_in(events)
        server.producer = self
        try:
            if self._holding:
                self._held.extend(events)
            elif not self._read_once and self._hold_first_read(events):
                pass  # _pong_after_sync handles it once this worker knows its siblings' interest
            else:
                self._handle(events, 0)
                self._settle_pongs()
            if error is not None and not self.closed:
                if self._holding:
                    self._held.append(("error", error))
                else:
                    self._protocol_error(error)
        except Exception:  # one connection's bug closes that connection only
            logger.exception("cid:%d - error handling client data; closing the connection", self.cid)
            self.close("Internal Error")
        finally:
            server.flush_dirty()  # while still the producer: a full subscriber or link pauses us
            server.producer = None

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is gone (also after our close). The transport goes too: a TLS or WebSocket
        layer refers back to this connection, and without that cycle the pair is freed at once
        rather than by the cyclic garbage collector (which cost each closed connection more)."""
        if not self.closed:
            self._cleanup("Client Closed" if exc is None else f"Read Error: {exc}")
        self.transport = None

    def pause_writing(self) -> None:
        self._timers["write_deadline"] = self.server.loop.call_later(
            self.server.options.write_deadline_s, self._write_deadline_expired)

    def resume_writing(self) -> None:
        timer = self._timers.pop("write_deadline", None)
        if timer is not None:
            timer.cancel()
        self._release_stalled()

    # --- event handling --------------------------------------------------------------------------

    def _handle(self, events: list[Event], start: int) -> None:
        """Handle events[start:]; stops early (holding the rest) while authentication is pending.

        The first branch is the hot path: a PUB from a connection with no per-message duties
        (not verbose, not pedantic, no permissions) is routed inline, without the calls of the
        general `_publish`.
        """
        required = self.server.auth.port(self.websocket).required
        count = len(events)
        i = start
        fast = self._fast_publish()
        sublist = self.account.sublist
        cache_get = sublist.cache.get
        echo = self.echo
        msgs = 0
        size = 0
        try:
            while i < count:
                event = events[i]
                i += 1
                op = event[0]
                if op == 1 and fast:  # OP_PUB
                    subject = event[1]
                    reply = event[2]
                    data = event[3]
                    msgs += 1
                    size += len(data)
                    result = cache_get(subject)
                    if result is None:
                        result = sublist.match(subject)
                    plain, queues = result
                    if not plain and not queues:
                        # nobody listens: the burst on this subject is only counted; with
                        # no-responders a PUB with a reply ends it (the general path answers that one)
                        taken, taken_bytes = count_pubs(events, i - 1, subject, not self.no_responders)
                        if taken:
                            i += taken - 1
                            msgs += taken - 1
                            size += taken_bytes - len(data)
                            continue
                    if not queues and len(plain) == 1 and (plain[0].conn is not self or echo):
                        # a burst for one subscriber (a client, or a sibling worker): one C call takes
                        # the run of PUBs with this subject; 0 when it cannot (the general path below)
                        deliver_pubs = getattr(plain[0].conn, "deliver_pubs", None)
                        taken, taken_bytes = deliver_pubs(plain[0], events, i - 1) if deliver_pubs else (0, 0)
                        if taken:
                            i += taken - 1
                            msgs += taken - 1
                            size += taken_bytes - len(data)
                            continue
                    delivered = 0
                    for sub in plain:
                        conn = sub.conn
                        if conn is self and not echo:
                            continue
                        conn.deliver(sub, subject, reply, None, data)
                        delivered += 1
                    if queues:
                        delivered += self._deliver_to_queues(queues, subject, reply, None, data)
                    if not delivered and reply is not None and self.no_responders:
                        self._send_no_responders(subject, reply)
                    continue
                if op == OP_PUB:
                    if not self.connected and required:
                        self._auth_violation()
                        return
                    msgs += 1
                    size += len(event[3])
                    self._publish(event[1], event[2], None, event[3])
                elif op == OP_HPUB:
                    if not self.connected and required:
                        self._auth_violation()
                        return
                    if not self.headers:
                        self.close("Protocol Violation: headers not enabled")
                        return
                    msgs += 1
                    size += len(event[4])
                    self._publish(event[1], event[2], event[3], event[4])
                else:
                    self._handle_control(event)
                    if self._payload_cut:  # a user JWT's lower max payload: PUBs parsed with it after CONNECT
                        events = self._cut_over_payload(events, i)
                        count = len(events)
                    if self._holding:
                        self._held = list(events[i:])
                        return
                    fast = self._fast_publish()
                    sublist = self.account.sublist
                    cache_get = sublist.cache.get
                    echo = self.echo
                if self.closed:
                    return
        finally:
            self.in_msgs += msgs
            self.in_bytes += size

    def _pong(self) -> None:
        self.write(wire.PONG)
        self.pongs_seen += 1
        if self.pongs_seen == 1 and self.protocol >= 1 and self.connected:
            self.write(self.server.connect_info_bytes(self))

    def _hold_first_read(self, events: list[Event]) -> bool:
        """With sibling workers, a client's first read waits until this worker knows the interest of
        every live sibling (fabric/sync.py): a worker that has just (re)started must not drop a PUB
        for a subscription a sibling made long before, only because its answer to our HELLO is still
        on the way. Returns True when the events are held (reading pauses meanwhile)."""
        self._read_once = True
        gate = self.server.interest_gate
        if gate is None or gate.interest_synced():
            return False
        self._holding = True
        self._held = list(events)
        self._pause_reading()
        gate.wait_interest_synced(self._pong_after_sync)
        return True

    def _settle_pongs(self) -> None:
        """With sibling workers, a PONG promises that every subscription the client sent before it —
        and, as on a single nats-server, in the same write — is in place on every worker. Clients
        put the flush PING in front of pending SUBs: nats-py writes it to the socket at once and its
        pending SUBs a moment later, in a separate write. So the answer waits until the whole read is
        handled, and for one more read when more bytes are already waiting in the socket, and then
        until the siblings have acknowledged the interest those reads changed."""
        if not self._pongs_owed or self._holding or self.closed:
            return
        gate = self.server.interest_gate
        # the connection's first PONG answers the PING a client sends with its CONNECT and waits for
        # before it subscribes anything (nats-py, nats.go): nothing to wait one more read for, and
        # no socket lookup and poll for the many connections that never live past it
        if gate is not None and not self._pong_deferred and self.pongs_seen and self._more_input_waiting():
            self._pong_deferred = True  # data_received comes again at once and settles them
            return
        self._pong_deferred = False
        if gate is None or gate.interest_synced():
            self._write_owed_pongs()
            return
        self._holding = True
        self._pause_reading()
        gate.wait_interest_synced(self._pong_after_sync)

    def _more_input_waiting(self) -> bool:
        """Bytes from the client are in the socket already (read in the next turn of the loop)."""
        if self._paused_reading or self.transport is None:
            return False
        if self._fd is None:  # looked up once, when first needed (only with sibling workers)
            sock = self.transport.get_extra_info("socket")
            self._fd = sock.fileno() if sock is not None else -1
        if self._fd < 0:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        try:
            return bool(poller.poll(0))
        except OSError:
            return False

    def _write_owed_pongs(self) -> None:
        owed, self._pongs_owed = self._pongs_owed, 0
        for _ in range(owed):
            self._pong()

    def _pong_after_sync(self) -> None:
        if self.closed:
            return
        held, self._held = self._held, []
        self._holding = False
        self.server.producer = self
        try:
            self._write_owed_pongs()
            self._resume_reading()
            self._handle(held, 0)
            self._settle_pongs()
        except Exception:
            logger.exception("cid:%d - error after an interest sync; closing the connection", self.cid)
            self.close("Internal Error")
        finally:
            self.server.flush_dirty()
            self.server.producer = None

    def _trace_in(self, events: list[Event]) -> None:
        """-V: every operation from the client, as nats-server's `<<- [...]` trace lines."""
        for event in events:
            op = event[0]
            if op == OP_PUB:
                text = b"PUB %s%s %d" % (event[1], b" " + event[2] if event[2] else b"", len(event[3]))
            elif op == OP_HPUB:
                text = b"HPUB %s%s %d %d" % (event[1], b" " + event[2] if event[2] else b"", len(event[3]),
                                             len(event[4]))
            elif op == OP_SUB:
                text = b"SUB %s %s %s" % (event[1], event[2] or b"", event[3])
            elif op == OP_UNSUB:
                text = b"UNSUB %s%s" % (event[1], b" %d" % event[2] if event[2] else b"")
            elif op == OP_CONNECT:
                text = b"CONNECT " + event[1]
            else:
                text = _TRACE_NAMES.get(op, b"?")
            logger.log(TRACE, "%s:%d - cid:%d - <<- [%s]", self.ip, self.port, self.cid,
                       text.decode(errors="replace"))

    def _cut_over_payload(self, events: list[Event], start: int) -> list[Event]:
        """The events up to the first PUB/HPUB from `start` over the client's new payload limit,
        then that limit's protocol error (the parser had read them with the server's limit)."""
        limit, self._payload_cut = self._payload_cut, 0
        for index in range(start, len(events)):
            event = events[index]
            op = event[0]
            size = len(event[3]) if op == OP_PUB else len(event[3] or b"") + len(event[4]) if op == OP_HPUB else -1
            if size > limit:
                error = ProtocolError(f"maximum payload exceeded: {size} vs {limit}", client_error=ERR_MAX_PAYLOAD)
                return [*events[:index], ("error", error)]
        return events

    def _fast_publish(self) -> bool:
        return (self.connected or not self.server.auth.port(self.websocket).required) and not self.verbose \
            and not self.pedantic and self.perms is None

    def _handle_control(self, event: Event) -> None:
        """Every event but PUB/HPUB."""
        op = event[0]
        if op == "error":
            self._protocol_error(event[1])
        elif op == OP_CONNECT:
            self._connect(event[1])
        elif not self.connected and self.server.auth.port(self.websocket).required:
            self._auth_violation()
        elif op == OP_PING:
            if self.server.interest_gate is None:
                self._pong()
            else:
                self._pongs_owed += 1  # answered by _settle_pongs once this read is handled
        elif op == OP_PONG:
            if self._pings_out:  # the answer to our PING: the RTT (an unasked PONG measures nothing)
                self.rtt_s = self.server.clock.monotonic() - self._ping_sent_s
            self._pings_out = 0
        elif op == OP_SUB:
            self._subscribe(event[1], event[2], event[3])
        elif op == OP_UNSUB:
            self._unsubscribe(event[1], event[2])

    def _start_first_ping(self) -> None:
        """The first server PING 2 s (+0..20 %) from now, or at the ping interval if shorter. At
        CONNECT a timer set when the connection started is due sooner: it is kept, and when it
        fires it waits the rest (`_ping_due_s`), rather than being cancelled and set again at
        every new connection (most never live to their first PING)."""
        loop = self.server.loop
        first_ping_s = limits.FIRST_PING_INTERVAL_S * (1 + 0.2 * self.server.rng.random())
        delay_s = min(first_ping_s, self.server.options.ping_interval_s)
        due_s = loop.time() + delay_s
        timer = self._timers.get("ping")
        if timer is not None and timer.when() <= due_s:
            self._ping_due_s = due_s
            return
        if timer is not None:
            timer.cancel()
        self._ping_due_s = 0.0
        self._timers["ping"] = loop.call_later(delay_s, self._ping_tick)

    def _connect(self, raw: bytes) -> bool:
        """Apply CONNECT. False if handling must pause (async auth) or the connection closed."""
        try:
            fields = json.loads(raw)
        except ValueError:
            self.close("Protocol Violation: bad CONNECT json")
            return False
        if not isinstance(fields, dict):
            self.close("Protocol Violation: bad CONNECT json")
            return False
        # As nats-server: the time from accept to CONNECT estimates the RTT until the first server
        # PING (2 s from now) is answered.
        self.rtt_s = self.server.clock.monotonic() - self._accepted_s
        self._start_first_ping()
        self.verbose = bool(fields.get("verbose", True))
        self.pedantic = bool(fields.get("pedantic", True))
        self.echo = bool(fields.get("echo", True))
        self.headers = bool(fields.get("headers", False))
        self.no_responders = bool(fields.get("no_responders", False))
        protocol = fields.get("protocol", 0)
        self.protocol = protocol if isinstance(protocol, int) else 0
        self.name = str(fields.get("name", "") or "")
        self.lang = str(fields.get("lang", "") or "")
        self.version = str(fields.get("version", "") or "")
        if self.no_responders and not self.headers:
            self.send_error(ERR_NO_RESPONDERS_HEADERS)
            self.close("Protocol Violation: no responders requires headers")
            return False
        for field_name, value in self.cookies.items():
            if not fields.get(field_name):
                fields[field_name] = value
        self._credentials = {key: fields[key] for key in ("user", "pass", "auth_token", "nkey", "sig", "jwt")
                             if key in fields}
        outcome = self.server.auth.authenticate(fields, self.peer_identity, self.nonce, websocket=self.websocket,
                                                host=self.ip, now_s=self.server.clock.wall())
        if isinstance(outcome, auth.Granted):
            self._bind(outcome.user, outcome.account, outcome.jwt)
            return not self.closed
        if isinstance(outcome, auth.NeedsBcrypt):
            self._holding = True
            self._pause_reading()
            task = self.server.loop.run_in_executor(None, auth.bcrypt_matches, outcome.given, outcome.hashed)
            task.add_done_callback(lambda done: self._bcrypt_done(done, outcome))
            return False
        if self.server.auth.jwt is not None:  # as nats-server: the reason at debug level
            logger.debug("%s:%d - cid:%d - %s", self.ip, self.port, self.cid, outcome.reason)
            logger.error("%s:%d - cid:%d - authentication error", self.ip, self.port, self.cid)
        else:
            logger.error("%s:%d - cid:%d - authentication error: %s", self.ip, self.port, self.cid, outcome.reason)
        self._auth_violation()
        return False

    def _bcrypt_done(self, done: asyncio.Future[bool], outcome: auth.NeedsBcrypt) -> None:
        if self.closed:
            return
        held, self._held = self._held, []
        self._holding = False
        ok = not done.cancelled() and done.exception() is None and done.result()
        self.server.producer = self
        try:
            if not ok:
                logger.error("%s:%d - cid:%d - authentication error: bad password for %r",
                             self.ip, self.port, self.cid, outcome.user.username)
                self._auth_violation()
                return
            self._checked_hash = outcome.hashed
            self._bind(outcome.user, outcome.account)
            self._resume_reading()
            self._handle(held, 0)
            self._settle_pongs()
        except Exception:
            logger.exception("cid:%d - error after authentication; closing the connection", self.cid)
            self.close("Internal Error")
        finally:
            self.server.flush_dirty()
            self.server.producer = None

    def _bind(self, user: Any, account_name: str, grant: JWTUser | None = None) -> None:
        account = self.server.accounts.get(account_name)
        if account is None:
            self._auth_violation()
            return
        if grant is not None and not self._admit_to_account(account, grant.max_account_connections):
            logger.error("%s:%d - cid:%d - %s", self.ip, self.port, self.cid, ERR_ACCOUNT_CONNECTIONS)
            self.send_error(ERR_ACCOUNT_CONNECTIONS)
            self.server.flush_dirty()
            self.close("Maximum Account Connections Exceeded")
            return
        if grant is not None:
            logger.debug('%s:%d - cid:%d - Authenticated JWT: Client "%s" by Account "%s"', self.ip, self.port,
                         self.cid, grant.public_key, grant.account)
            self._apply_jwt_limits(grant)
        if account is not self.account:
            self.account.clients -= 1
            self.account = account
            account.clients += 1
        if user is not None:
            self.user = user.nkey or user.username
            # a certificate-mapped user is re-checked by its cert, a JWT user by its account's JWT
            if grant is None and (user.nkey or not self.server.auth.port(self.websocket).tls_map):
                self._bound_as = ("nkey", user.nkey) if user.nkey else ("user", user.username)
            if user.permissions is not None:
                self.perms = auth.ClientPermissions(user.permissions)
        self.connected = True
        timer = self._timers.pop("auth", None)
        if timer is not None:
            timer.cancel()
        if self.verbose:
            self.write(wire.OK)

    def _admit_to_account(self, account: Account, limit: int) -> bool:
        """The account's `conn` limit (-1: none), over every worker of the server when they share a gate."""
        if limit < 0:
            return True
        local = account.clients - (account is self.account)
        gate = self.server.account_gate
        return gate.admit(self.cid, account.name, limit, local) if gate is not None else local < limit

    def _apply_jwt_limits(self, grant: JWTUser) -> None:
        """nats-server's applyAccountLimits for a JWT user, and the timer of its expiry."""
        options = self.server.options
        self.jwt_user = grant
        self.max_subs = grant.max_subs
        if 0 < grant.max_payload < options.max_payload:
            self.parser.set_limits(max_control_line=options.max_control_line, max_payload=grant.max_payload)
            self._payload_cut = grant.max_payload
        now_s = self.server.clock.wall()
        if grant.expires > 0:
            self._timers["expiry"] = self.server.loop.call_later(max(grant.expires - now_s, 0.0), self._auth_expired)
        if grant.account_expires > 0:
            self._timers["account expiry"] = self.server.loop.call_later(max(grant.account_expires - now_s, 0.0),
                                                                         self.account_expired)

    def account_expired(self) -> None:
        """The account's JWT was deleted (or expired): nats-server's accountAuthExpired."""
        if not self.closed:
            self.send_error(ERR_ACCOUNT_EXPIRED)
            self.server.flush_dirty()
            self.close("Authentication Expired")

    def _auth_expired(self) -> None:
        if not self.closed:
            logger.debug("%s:%d - cid:%d - %s", self.ip, self.port, self.cid, ERR_AUTH_EXPIRED)
            self.send_error(ERR_AUTH_EXPIRED)
            self.server.flush_dirty()
            self.close("Authentication Expired")

    def _subscribe(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        if not is_valid_subject(subject) or (queue is not None and not is_valid_subject(queue)):
            self.send_error(ERR_INVALID_SUBJECT)
            return
        if self.perms is not None and not self.perms.can_subscribe(subject):
            text = f'Permissions Violation for Subscription to "{subject.decode(errors="replace")}"'
            if queue is not None:
                text += f' using queue "{queue.decode(errors="replace")}"'
            logger.error("cid:%d - %s", self.cid, text)
            self.send_error(text)
            return
        max_subs = self.max_subs if self.max_subs >= 0 else self.server.options.max_subscriptions or -1
        if max_subs >= 0 and len(self.subs) >= max_subs:
            self.send_error(ERR_MAX_SUBS)
            return
        if sid not in self.subs:
            sub = Subscription(self, subject, queue, sid, self.account.name)
            self.subs[sid] = sub
            self.account.sublist.insert(sub)
            self.server.on_interest_change(self.account, sub, added=True)
        if self.verbose:
            self.write(wire.OK)

    def _unsubscribe(self, sid: bytes, max_msgs: int | None) -> None:
        sub = self.subs.get(sid)
        if sub is not None:
            if max_msgs and max_msgs > sub.delivered:
                sub.max_msgs = max_msgs
            else:
                self.remove_subscription(sub)
        if self.verbose:
            self.write(wire.OK)

    def remove_subscription(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.sublist.remove(sub)
            self.server.on_interest_change(self.account, sub, added=False)

    # --- the router's hot path -------------------------------------------------------------------

    def _publish(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if self.verbose:
            self.write(wire.OK)
        if self.pedantic and not is_valid_publish_subject(subject):
            self.send_error(ERR_INVALID_PUB_SUBJECT)
            return
        if self.perms is not None and not self.perms.can_publish(subject, self.server.clock.monotonic()):
            text = f'Permissions Violation for Publish to "{subject.decode(errors="replace")}"'
            logger.error("cid:%d - %s", self.cid, text)
            self.send_error(text)
            return
        delivered = route(self.account, subject, reply, header, data, origin=self, echo=self.echo,
                          rng=self.server.rng)
        if not delivered and reply is not None and self.no_responders:
            self._send_no_responders(subject, reply)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        """Append one MSG/HMSG for `sub` to the outbound buffer."""
        if self.closed or (sub.max_msgs and sub.delivered >= sub.max_msgs):
            return  # closed, or auto-unsubscribed earlier in a batch that still holds the match
        perms = self.perms
        if perms is not None:
            if perms.sub_deny and perms.deliver_denied(subject):
                return
            if reply is not None:
                perms.note_reply(reply, self.server.clock.monotonic())
        if header is not None and not self.headers:
            data = data[len(header):]  # a client without headers gets the payload alone, as MSG
            header = None
        append_msg(self._out, subject, sub.msg_tail, reply, -1 if header is None else len(header), data)
        self.out_msgs += 1
        self.out_bytes += len(data)
        if not self._dirty:
            self._dirty = True
            self.server.dirty.append(self)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_subscription(sub)

    def deliver_pubs(self, sub: Subscription, events: list[Event], start: int) -> tuple[int, int]:
        """The PUB events from events[start] on with the same subject, for `sub` alone, appended in one
        call as `deliver` would one by one. Returns (events used, payload bytes); (0, 0) when the
        run needs deliver's per-message checks (permissions) or nothing is to be delivered."""
        if self.perms is not None or self.closed:
            return 0, 0
        limit = len(events) - start
        if sub.max_msgs:
            limit = sub.max_msgs - sub.delivered
            if limit <= 0:
                return 0, 0
        appended, data_bytes = append_pub_msgs(self._out, events, start, events[start][1], sub.msg_tail, limit)
        if appended:
            self.out_msgs += appended
            self.out_bytes += data_bytes
            if not self._dirty:
                self._dirty = True
                self.server.dirty.append(self)
            sub.delivered += appended
            if sub.max_msgs and sub.delivered >= sub.max_msgs:
                self.remove_subscription(sub)
        return appended, data_bytes

    def deliver_run(self, sub: Subscription, payload: bytes, start: int, end: int, count: int) -> bool:
        """Append the `count` plain records of payload[start:end] (a run from a sibling worker, one
        subject) for `sub` in one call, as `deliver` would one by one. False when the run needs the
        per-message checks of `deliver` (permissions): the caller delivers the records one by one."""
        if self.perms is not None:
            return False
        if self.closed:
            return True
        limit = count
        if sub.max_msgs:
            limit = sub.max_msgs - sub.delivered
            if limit <= 0:
                return True  # auto-unsubscribed earlier in the batch
        appended, _, data_bytes = append_msgs(self._out, payload, start, end, sub.msg_tail, self.headers, limit)
        self.out_msgs += appended
        self.out_bytes += data_bytes
        if not self._dirty:
            self._dirty = True
            self.server.dirty.append(self)
        sub.delivered += appended
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_subscription(sub)
        return True

    def _deliver_to_queues(self, queues: tuple[tuple[Subscription, ...], ...], subject: bytes,
                           reply: bytes | None, header: bytes | None, data: bytes) -> int:
        delivered = 0
        for members in queues:
            chosen = pick(members, self, self.echo, self.server.rng)
            if chosen is not None:
                chosen.conn.deliver(chosen, subject, reply, header, data)
                delivered += 1
        return delivered

    def send_no_responders(self, subject: bytes, reply: bytes) -> None:
        """A request nobody received (through a service import too): tell the requester (status 503)."""
        self._send_no_responders(subject, reply)

    def _send_no_responders(self, subject: bytes, reply: bytes) -> None:
        """A request nobody received: tell the requester at once (status 503)."""
        plain, _ = self.account.sublist.match(reply)
        for sub in plain:
            if sub.conn is self:
                header = wire.no_responders_headers(subject)
                self.write(b"HMSG %s%s%d %d\r\n%s\r\n" % (reply, sub.msg_tail, len(header), len(header), header))
                return

    # --- output ---------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out += data
        if not self._dirty:
            self._dirty = True
            self.server.dirty.append(self)

    def send_error(self, text: str) -> None:
        self.write(wire.err(text))

    def flush(self) -> None:
        """Hand the outbound buffer to the transport; enforce max_pending (slow consumer)."""
        self._dirty = False
        transport = self.transport
        if self.closed or transport is None or not self._out:
            return
        data, self._out = self._out, bytearray()
        transport.write(data)
        pending = transport.get_write_buffer_size()
        if pending > self.server.options.max_pending:
            self.server.slow_consumers += 1
            logger.warning("%s:%d - cid:%d - Slow Consumer Detected: MaxPending of %d Exceeded",
                           self.ip, self.port, self.cid, self.server.options.max_pending)
            self.close("Slow Consumer (Pending Bytes)", abort=True)
        elif pending > self.server.options.max_pending * 3 // 4:
            producer = self.server.producer
            if producer is not None and producer is not self and len(self._stalled_producers) < limits.STALLED_PRODUCERS_MAX:
                self._stalled_producers[producer] = None
                producer.pause_for_backpressure()
                if "stall" not in self._timers:  # bounded, as nats-server's stallTotalAllowed: a subscriber
                    # that reads nothing must not hold its publishers until the write deadline closes it
                    self._timers["stall"] = self.server.loop.call_later(limits.PRODUCER_STALL_MAX_S,
                                                                        self._stall_over)

    def pending_bytes(self) -> int:
        if self.transport is None or self.closed:
            return 0
        return self.transport.get_write_buffer_size() + len(self._out)

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None and not self.closed:
            self._paused_reading = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._paused_reading and self.transport is not None and not self.closed:
            self._paused_reading = False
            self.transport.resume_reading()

    def pause_for_backpressure(self) -> None:
        """A link this connection's messages go to is full: stop reading until it drains."""
        self._pause_reading()

    def resume_after_backpressure(self) -> None:
        if not self._holding:
            self._resume_reading()

    def _stall_over(self) -> None:
        self._timers.pop("stall", None)
        self._release_stalled()

    def _release_stalled(self) -> None:
        timer = self._timers.pop("stall", None)
        if timer is not None:
            timer.cancel()
        stalled, self._stalled_producers = self._stalled_producers, {}
        for producer in stalled:
            producer.resume_after_backpressure()

    # --- timers and closing ----------------------------------------------------------------------

    def _ping_tick(self) -> None:
        if self.closed:
            return
        if self._ping_due_s:  # the first PING was put off (a CONNECT after the timer was set)
            rest_s = self._ping_due_s - self.server.loop.time()
            self._ping_due_s = 0.0
            if rest_s > 0:
                self._timers["ping"] = self.server.loop.call_later(rest_s, self._ping_tick)
                return
        options = self.server.options
        now = self.server.clock.monotonic()
        # As nats-server: an active client is not PINGed, unless its RTT is unmeasured or an hour old.
        need_rtt = not self._ping_sent_s or now - self._ping_sent_s > limits.RTT_MEASUREMENT_INTERVAL_S
        if now - self.last_in_s < options.ping_interval_s and self.pongs_seen and not need_rtt:
            self._pings_out = 0
        elif self._pings_out + 1 > options.ping_max:
            self.server.stale_connections += 1
            logger.debug("cid:%d - Stale Client Connection - Closing", self.cid)
            self.send_error(ERR_STALE)
            self.server.flush_dirty()
            self.close("Stale Connection")
            return
        else:
            self._pings_out += 1
            self._ping_sent_s = now
            self.write(wire.PING)
            self.server.flush_dirty()
        self._timers["ping"] = self.server.loop.call_later(options.ping_interval_s, self._ping_tick)

    def _auth_timeout(self) -> None:
        if not self.connected and not self.closed:
            self.send_error(ERR_AUTH_TIMEOUT)
            self.server.flush_dirty()
            self.close("Authentication Timeout")

    def _write_deadline_expired(self) -> None:
        if not self.closed:
            self.server.slow_consumers += 1
            logger.warning("%s:%d - cid:%d - Slow Consumer Detected: WriteDeadline of %ss exceeded",
                           self.ip, self.port, self.cid, self.server.options.write_deadline_s)
            self.close("Slow Consumer (Write Deadline)", abort=True)

    def close_over_max_connections(self) -> None:
        logger.error("%s:%d - cid:%d - maximum connections exceeded", self.ip, self.port, self.cid)
        self.send_error("maximum connections exceeded")
        self.close("Maximum Connections Exceeded")  # close() writes what is buffered first

    def recheck_authorization(self) -> bool:
        """After a config reload (appliance/server/reload.py), as nats-server's reloadAuthorization: a
        client whose user is gone or now belongs to another account is closed (Client Closed, no -ERR:
        it reconnects and lands where it now belongs); one no longer allowed in gets -ERR 'Authorization
        Violation' and is closed (False either way); the others get their user's new permissions."""
        if not self.connected or self.closed:
            return True
        if self._moved_account():
            logger.info("%s:%d - cid:%d - user gone or moved to another account by a reload; closing",
                        self.ip, self.port, self.cid)
            self.close("Client Closed")
            return False
        outcome = self.server.auth.authenticate(self._credentials, self.peer_identity, self.nonce,
                                                websocket=self.websocket, host=self.ip,
                                                now_s=self.server.clock.wall())
        if isinstance(outcome, auth.NeedsBcrypt):
            same_hash = outcome.hashed == self._checked_hash
            if same_hash or auth.bcrypt_matches(outcome.given, outcome.hashed):
                self._checked_hash = outcome.hashed
                outcome = auth.Granted(outcome.user, outcome.account)
        if not isinstance(outcome, auth.Granted) or outcome.account != self.account.name:
            reason = outcome.reason if isinstance(outcome, auth.Denied) else "account changed"
            logger.error("%s:%d - cid:%d - authentication error after reload: %s", self.ip, self.port, self.cid, reason)
            if reason == jwt_auth.REVOKED:  # an account JWT revoked the user: nats-server's own -ERR
                self.send_error(ERR_AUTH_REVOKED)
                self.server.flush_dirty()
                self.close("Credentials Revoked")
            else:
                self._auth_violation()
            return False
        user = outcome.user
        self.perms = auth.ClientPermissions(user.permissions) if user is not None and user.permissions else None
        if outcome.jwt is not None:  # the account's new limits (applyAccountLimits)
            self.max_subs = outcome.jwt.max_subs
            limit = outcome.jwt.max_payload if 0 < outcome.jwt.max_payload else self.server.options.max_payload
            self.parser.set_limits(max_control_line=self.server.options.max_control_line,
                                   max_payload=min(limit, self.server.options.max_payload))
        return True

    def _moved_account(self) -> bool:
        """nats-server's clientHasMovedToDifferentAccount: by the user (or NKey) it was let in as."""
        if self._bound_as is None:
            return self.server.accounts.get(self.account.name) is not self.account  # its account was removed
        kind, key = self._bound_as
        auth_now = self.server.auth
        user = (auth_now.nkeys if kind == "nkey" else auth_now.port(self.websocket).users).get(key)
        return user is None or user.account != self.account.name

    def _auth_violation(self) -> None:
        self.send_error(ERR_AUTH_VIOLATION)
        self.server.flush_dirty()
        self.close("Authentication Failure")

    def _protocol_error(self, error: ProtocolError) -> None:
        logger.debug("cid:%d - protocol error: %s", self.cid, error)
        if error.client_error:
            self.send_error(error.client_error)
            self.server.flush_dirty()
        self.close(f"Protocol Violation: {error}")

    def close(self, reason: str, *, abort: bool = False) -> None:
        """Close after flushing what is buffered (or at once with abort); idempotent."""
        if self.closed:
            return
        if not abort and self._out and self.transport is not None:
            self.transport.write(bytes(self._out))
        self._out.clear()
        self._cleanup(reason)
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _cleanup(self, reason: str) -> None:
        self.closed = True
        self.close_reason = reason
        self.stop_wall_s = self.server.clock.wall()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for sub in list(self.subs.values()):
            self.remove_subscription(sub)
        self._release_stalled()
        if self.server.account_gate is not None:
            self.server.account_gate.release(self.cid)
        self.server.unregister(self)
        logger.debug("%s:%d - cid:%d - Client connection closed: %s", self.ip, self.port, self.cid, reason)
