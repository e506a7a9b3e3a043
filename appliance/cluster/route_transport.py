"""RouteRaftTransport: RAFT messages between hosts as internal messages of the system account.

One per worker that owns RAFT groups (today worker 0: it runs JetStream and holds the routes).
A message for `group_id` on peer `to` leaves as an ordinary message on

    $ARAFT.<to>.<group_id>.<from>

published by an InternalClient of the system account (the global account when the server has
none). The worker subscribes `$ARAFT.<own peer>.>`, so the subscription is advertised to every
route like any interest (RS+ $SYS $ARAFT.<peer>.>) and the messages of other hosts reach it;
a plain nats-server node receives that interest too but never publishes on those subjects, so it
is unaffected. Peer ids are the 8-character tokens of `peer_token(server_name)` (spec §9.2, the
hash nats-server uses): subject-safe, stable as long as the server name is.

`send` never blocks: a message with nobody interested on the way (the peer is unknown or its
route is down) or whose route is congested (the link's write buffer is over its high-water mark)
is dropped and counted; RAFT resends what matters. Inbound messages go to
`registry.deliver(group_id, sender, payload)`, which drops and counts strangers' messages.
"""

from __future__ import annotations

import hashlib
import logging
import string

from appliance import limits
from appliance.cluster.registry import GroupRegistry
from appliance.server.accounts import Account
from appliance.server.internal import InternalClient
from appliance.server.routes import RoutePeer
from appliance.server.server import Server

logger = logging.getLogger(__name__)

RAFT_SUBJECT_PREFIX = b"$ARAFT."
PEER_TOKEN_LEN = 8
_TOKEN_DIGITS = string.digits + string.ascii_uppercase + string.ascii_lowercase
_TOKEN_FORBIDDEN = frozenset(b". *>\t\r\n")


def peer_token(server_name: str) -> str:
    """nats-server's peer id of a server (spec §9.2): 8 base-62 digits of sha256(name)."""
    digest = hashlib.sha256(server_name.encode()).digest()
    return "".join(_TOKEN_DIGITS[byte % len(_TOKEN_DIGITS)] for byte in digest[:PEER_TOKEN_LEN])


def is_subject_token(token: str) -> bool:
    """One subject token: not empty, no separator, wildcard or whitespace."""
    raw = token.encode()
    return bool(raw) and not (_TOKEN_FORBIDDEN & set(raw))


def system_account(server: Server) -> Account:
    name = server.accounts.system_name
    account = server.accounts.get(name) if name else None
    return account if account is not None else server.global_account()


class RouteRaftTransport:
    def __init__(self, server: Server, own_peer: str) -> None:
        if not is_subject_token(own_peer):
            raise ValueError(f"RAFT peer id {own_peer!r} is not a subject token")
        self.server = server
        self.own_peer = own_peer
        self.account = system_account(server)
        self.client = InternalClient(server, self.account, "RAFT transport")
        self.registry: GroupRegistry | None = None
        self.sent = 0
        self.received = 0
        self.dropped_unreachable = 0  # nobody interested: the peer is unknown or its route is down
        self.dropped_congested = 0  # the route to the peer is over its write high-water mark
        self.dropped_malformed = 0  # an inbound subject that is not $ARAFT.<us>.<group>.<sender>
        self._subjects: dict[tuple[str, str], bytes] = {}  # (peer, group) -> its checked subject

    def attach(self, registry: GroupRegistry) -> None:
        """Start receiving for `registry` (the registry is built with this transport first)."""
        assert self.registry is None
        self.registry = registry
        self.client.subscribe(RAFT_SUBJECT_PREFIX + self.own_peer.encode() + b".>", self._on_message)

    def close(self) -> None:
        self.client.close()

    def send(self, peer: str, group_id: str, message: bytes) -> None:
        subject = self._subjects.get((peer, group_id))
        if subject is None:
            subject = self._subject(peer, group_id)
        plain, queues = self.account.sublist.match(subject)
        if not plain and not queues:
            self.dropped_unreachable += 1
            return
        for sub in plain:
            conn = sub.conn
            if isinstance(conn, RoutePeer) and conn.congested:
                self.dropped_congested += 1
                return
        self.client.publish(subject, message)
        self.sent += 1

    def _subject(self, peer: str, group_id: str) -> bytes:
        """`$ARAFT.<peer>.<group>.<us>`, checked and built once per (peer, group): every RAFT
        message of a group goes to the same few."""
        if not (is_subject_token(peer) and is_subject_token(group_id)):
            raise ValueError(f"RAFT peer {peer!r} or group {group_id!r} is not a subject token")
        subject = b"%s%s.%s.%s" % (RAFT_SUBJECT_PREFIX, peer.encode(), group_id.encode(), self.own_peer.encode())
        if len(self._subjects) >= limits.RAFT_SUBJECTS_CACHED_MAX:
            self._subjects.clear()
        self._subjects[(peer, group_id)] = subject
        return subject

    def flush(self) -> None:
        """Write what `send` queued to the route sockets now (the server's dirty connections)."""
        self.server.flush_dirty()

    def _on_message(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        tokens = subject.split(b".")
        if len(tokens) != 4 or self.registry is None:
            self.dropped_malformed += 1
            return
        payload = data[len(header):] if header is not None else data
        self.received += 1
        self.registry.deliver(tokens[2].decode(errors="replace"), tokens[3].decode(errors="replace"), payload)
