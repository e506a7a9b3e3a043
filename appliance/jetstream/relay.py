"""Delivery relay: consumer deliveries that cross to a sibling worker keep the stream subject.

A consumer delivers to an inbox or deliver subject but hands the message over under the
original stream subject (nats-server's "deliver subject" rewrite). The local fabric forwards a
message under the subject it is routed on, so a delivery whose subscriber sits on a sibling
worker is sent as

    subject  $JSD.<deliver subject>          (or $JSDQ.<deliver subject> for a queue member)
    reply    <ack subject>@<stream subject>[@<queue>]

(nats-server's route convention `<ack>@<original subject>`) to the relay every JetStream-enabled
worker runs, which delivers it to its own subscribers under the stream subject.
"""

from __future__ import annotations

from appliance import limits
from appliance.server.accounts import Account
from appliance.server.internal import InternalClient
from appliance.server.router import pick
from appliance.server.server import Server
from appliance.server.sublist import Subscription

RELAY_PREFIX = b"$JSD."
RELAY_QUEUE_PREFIX = b"$JSDQ."
ACK_PREFIXES = (b"$JS.ACK.",)  # ack subjects are unique: matched, never cached, on every worker

# The plain subscription each link interest is carried as (one per link subscription, reused).
_carriers: dict[Subscription, Subscription] = {}


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
    tail = (reply or b"") + b"@" + subject + (b"@" + queue if queue else b"")
    prefix = RELAY_QUEUE_PREFIX if queue else RELAY_PREFIX
    link_sub.conn.deliver(carrier, prefix + match, tail, header, data)


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
    """Deliver to this worker's own subscribers of `match` (never back over a link) as `subject`."""
    sublist = account.sublist
    result = sublist.cache.get(match)
    if result is None:
        result = sublist.match(match)
    plain, queues = result
    count = 0
    if queue is None:
        for sub in plain:
            if not getattr(sub.conn, "is_link", False):
                sub.conn.deliver(sub, subject, reply, header, data)
                count += 1
    for members in queues:
        if queue is not None and members[0].queue != queue:
            continue
        local = tuple(m for m in members if not getattr(m.conn, "is_link", False))
        if local:
            chosen = pick(local, None, True, server.rng)
            if chosen is not None:
                chosen.conn.deliver(chosen, subject, reply, header, data)
                count += 1
    server.schedule_flush()
    return count


class DeliveryRelay:
    """Runs on every worker of a JetStream server: hands relayed deliveries to local subscribers."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.clients: list[InternalClient] = []
        for account in server.accounts.all():
            if not account.jetstream:
                continue
            client = InternalClient(server, account, f"JetStream relay {account.name}")
            account.sublist.uncached_prefixes = ACK_PREFIXES
            client.subscribe(RELAY_PREFIX + b">", self._handler(account, queued=False))
            client.subscribe(RELAY_QUEUE_PREFIX + b">", self._handler(account, queued=True))
            self.clients.append(client)

    def _handler(self, account: Account, *, queued: bool):  # type: ignore[no-untyped-def]
        prefix = len(RELAY_QUEUE_PREFIX if queued else RELAY_PREFIX)

        def on_relayed(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            if not reply:
                return
            queue: bytes | None = None
            if queued and reply.count(b"@") >= 2:
                reply, _, queue = reply.rpartition(b"@")
            ack, _, original = reply.rpartition(b"@")  # the ack subject may hold '@' itself
            deliver_local(
                self.server, account, subject[prefix:], original, ack or None, header, data, queue=queue
            )

        return on_relayed

    def close(self) -> None:
        for client in self.clients:
            client.close()
