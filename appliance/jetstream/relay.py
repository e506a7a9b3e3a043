"""Delivery relay: consumer deliveries that cross to a sibling worker keep the stream subject.

A consumer delivers to an inbox or deliver subject but hands the message over under the
original stream subject (nats-server's "deliver subject" rewrite). The local fabric forwards a
message under the subject it is routed on, so a delivery whose subscriber sits on a sibling
worker is sent as

    subject  $JSD.<deliver subject>          (or $JSDQ.<deliver subject> for a queue member)
    reply    <ack subject>@<stream subject>[@<queue>]

(nats-server's route convention `<ack>@<original subject>`) to the relay every JetStream-enabled
worker runs, which delivers it to its own subscribers under the stream subject: a `$JSD` record
to the plain subscribers of the deliver subject (the sending worker picked queue members itself),
a `$JSDQ` record to one local member of the named queue group.

Hot path, in runs. The sending worker binds one pull request's target once (`relay_deliverer`):
each delivery of the batch is one record appended to the link, no routing per message. The
receiving worker gets those records as one run with one subject (`$JSD.<inbox>`): the relay's run
handler matches the inbox once and writes the whole run into each local client's output in one C
call (`append_relayed_msgs`, which splits every reply at its last '@': the ack subject may hold
'@' itself, the stream subject does not). Internal subscribers, clients with permissions and
anything unusual (a malformed record) get the records one by one (`on_relayed`, `deliver_local`).
"""

from __future__ import annotations

from collections.abc import Callable

from appliance import limits
from appliance.server.accounts import Account
from appliance.server.client import ClientConnection
from appliance.server.internal import Handler, InternalClient
from appliance.server.links import RELAY_PREFIX, RELAY_QUEUE_PREFIX, LinkPeer, append_relayed_msgs, record_subject
from appliance.server.router import pick
from appliance.server.server import Server
from appliance.server.sublist import Subscription

ACK_PREFIXES = (b"$JS.ACK.",)  # ack subjects are unique: matched, never cached, on every worker

# The plain subscription each link interest is carried as (one per link subscription, reused).
_carriers: dict[Subscription, Subscription] = {}

# deliver(subject, reply, header, payload) -> deliveries made; header is None or the header block
Deliver = Callable[[bytes, "bytes | None", "bytes | None", bytes], int]


def relay_reply(ack: bytes | None, subject: bytes, queue: bytes | None) -> bytes:
    """`<ack>@<stream subject>[@<queue>]`: what a relayed record carries as its reply."""
    tail = (ack or b"") + b"@" + subject
    return tail + b"@" + queue if queue else tail


def relay_message(
    link_sub: Subscription,
    match: bytes,
    subject: bytes,
    reply: bytes | None,
    header: bytes | None,
    data: bytes,
) -> None:
    """Forward one delivery to the sibling worker behind `link_sub` (a link's subscription)."""
    queue = link_sub.queue
    carrier = _carriers.get(link_sub)
    if carrier is None:
        if len(_carriers) >= limits.JS_RELAY_CARRIERS_MAX:
            _carriers.clear()
        carrier = Subscription(link_sub.conn, link_sub.subject, None, b"", link_sub.account)
        _carriers[link_sub] = carrier
    prefix = RELAY_QUEUE_PREFIX if queue else RELAY_PREFIX
    link_sub.conn.deliver(carrier, prefix + match, relay_reply(reply, subject, queue), header, data)


def route_delivery(route_sub: Subscription, match: bytes, subject: bytes, reply: bytes | None,
                   header: bytes | None, data: bytes) -> None:
    """One delivery to a subscriber on another server (a route's subscription of `match`): a push
    delivery whose stream subject differs from the deliver subject goes as nats-server sends it,
    `RMSG <deliver subject> <ack reply>@<stream subject>` (spec/cluster-and-routes.md §4.4); the
    receiving server gives its client the stream subject and the ack reply."""
    if subject != match and reply is not None and reply.startswith(b"$JS.ACK."):
        route_sub.conn.deliver(route_sub, match, reply + b"@" + subject, header, data)
    else:
        route_sub.conn.deliver(route_sub, match if subject != match else subject, reply, header, data)


def relay_deliverer(link_sub: Subscription, match: bytes) -> Deliver:
    """`relay_message` bound to one plain link subscription and target for a run of deliveries made
    in one call (a pull request's batch): one record appended per message, nothing routed; the
    records leave in JS_RELAY_PIPELINE_BYTES frames (fewer, larger writes on the sibling)."""
    peer = link_sub.conn
    assert isinstance(peer, LinkPeer) and link_sub.queue is None
    append = peer.deliverer(link_sub, RELAY_PREFIX + match, limits.JS_RELAY_PIPELINE_BYTES)

    def deliver_one(subject: bytes, reply: bytes | None, header: bytes | None, payload: bytes) -> int:
        if header is None:
            append((reply or b"") + b"@" + subject, -1, payload)
        else:
            append((reply or b"") + b"@" + subject, len(header), header + payload)
        return 1

    return deliver_one


def deliver_local(
    server: Server,
    account: Account,
    match: bytes,
    subject: bytes,
    reply: bytes | None,
    header: bytes | None,
    data: bytes,
    *,
    queue: bytes | None = None,
) -> int:
    """Deliver to this worker's own subscribers of `match` (never back over a link) as `subject`:
    its plain subscribers, or with `queue` one local member of that queue group (the sending
    worker chose the members of every other group itself)."""
    sublist = account.sublist
    result = sublist.cache.get(match)
    if result is None:
        result = sublist.match(match)
    plain, queues = result
    count = 0
    if queue is None:
        for sub in plain:
            if not sub.conn.is_link:
                sub.conn.deliver(sub, subject, reply, header, data)
                count += 1
    else:
        for members in queues:
            if members[0].queue != queue:
                continue
            local = tuple(m for m in members if not m.conn.is_link)
            if local:
                chosen = pick(local, None, True, server.rng)
                if chosen is not None:
                    chosen.conn.deliver(chosen, subject, reply, header, data)
                    count += 1
    server.schedule_flush()
    return count


def write_relayed_run(conn: ClientConnection, sub: Subscription, payload: bytes, start: int, end: int,
                      count: int) -> None:
    """The `count` relayed records of payload[start:end] as MSG/HMSG lines for `sub` of `conn` (a
    client without permissions), as `deliver` would write them one by one; ValueError, and nothing
    written, when a record is malformed."""
    if conn.closed:
        return
    limit = count
    if sub.max_msgs:
        limit = sub.max_msgs - sub.delivered
        if limit <= 0:
            return  # auto-unsubscribed earlier in the batch
    out = bytearray()
    appended, _, data_bytes = append_relayed_msgs(out, payload, start, end, sub.msg_tail, conn.headers, limit)
    conn.write(out)
    conn.out_msgs += appended
    conn.out_bytes += data_bytes
    sub.delivered += appended
    if sub.max_msgs and sub.delivered >= sub.max_msgs:
        conn.remove_subscription(sub)


class DeliveryRelay:
    """Runs on every worker of a JetStream server: hands relayed deliveries to local subscribers."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.clients: dict[str, InternalClient] = {}  # per JetStream account
        self.runs = 0  # runs written whole (run handler), for tests and monitoring
        self.accounts_changed([], [])
        server.account_listeners.append(self.accounts_changed)

    def accounts_changed(self, _added: list[Account], _removed: list[Account]) -> None:
        """At start and after a reload: a relay client for each account with JetStream, none for others."""
        registry = self.server.accounts
        for name, client in list(self.clients.items()):
            if registry.get(name) is not client.account or not client.account.jetstream:
                del self.clients[name]
                client.close()
        for account in registry.all():
            if not account.jetstream or account.name in self.clients:
                continue
            client = InternalClient(self.server, account, f"JetStream relay {account.name}")
            account.sublist.uncached_prefixes = ACK_PREFIXES
            client.subscribe(RELAY_PREFIX + b">", self._handler(account, queued=False),
                             run_handler=self._run_handler(account))
            client.subscribe(RELAY_QUEUE_PREFIX + b">", self._handler(account, queued=True))
            self.clients[account.name] = client

    def _handler(self, account: Account, *, queued: bool) -> Handler:
        prefix = len(RELAY_QUEUE_PREFIX if queued else RELAY_PREFIX)

        def on_relayed(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            if not reply:
                return
            queue: bytes | None = None
            if queued:
                if reply.count(b"@") < 2:
                    return
                reply, _, queue = reply.rpartition(b"@")
            ack, at, original = reply.rpartition(b"@")  # the ack subject may hold '@' itself
            if not at or not original:
                return  # not a relayed delivery
            deliver_local(
                self.server, account, subject[prefix:], original, ack or None, header, data, queue=queue
            )

        return on_relayed

    def _run_handler(self, account: Account) -> Callable[[bytes, int, int, int], bool]:
        prefix = len(RELAY_PREFIX)
        sublist = account.sublist

        def on_relayed_run(payload: bytes, start: int, end: int, count: int) -> bool:
            match = record_subject(payload, start)[prefix:]
            result = sublist.cache.get(match)
            if result is None:
                result = sublist.match(match)
            targets: list[tuple[ClientConnection, Subscription]] = []
            for sub in result[0]:
                conn = sub.conn
                if conn.is_link:
                    continue
                if not isinstance(conn, ClientConnection) or conn.perms is not None or sub.max_msgs:
                    return False  # record by record: an internal subscriber, permissions, a max_msgs
                if not conn.closed:
                    targets.append((conn, sub))
            for index, (conn, sub) in enumerate(targets):
                try:
                    write_relayed_run(conn, sub, payload, start, end, count)
                except ValueError:
                    assert index == 0, "the first subscriber's run validated every record"
                    return False  # a malformed record: on_relayed decides record by record
            self.runs += 1
            return True

        return on_relayed_run

    def close(self) -> None:
        if self.accounts_changed in self.server.account_listeners:
            self.server.account_listeners.remove(self.accounts_changed)
        for client in self.clients.values():
            client.close()
