"""A client connection as the monitoring contract shows it (`monitor/view.py` ConnectionInfo).

The server records a connection the moment it closes (`ClosedConnections`, its bounded ring of
closed connections, nats-server's max_closed_clients), so /connz?state=closed reads small immutable
records rather than keeping whole connections — buffers, parser, transport — alive for 10,000
closes. A record is a plain tuple of the connection's values, made into a ConnectionInfo only when
monitoring first reads it: building the frozen dataclass at every close cost each new connection ~6 us.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from appliance.server.monitor.view import ConnectionInfo, SubscriptionInfo
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.server.client import ClientConnection


def subscription_info(sub: Subscription, cid: int) -> SubscriptionInfo:
    return SubscriptionInfo(
        subject=sub.subject.decode(errors="replace"),
        sid=sub.sid.decode(errors="replace"),
        cid=cid,
        account=sub.account,
        queue=sub.queue.decode(errors="replace") if sub.queue else "",
        msgs=sub.delivered,
        max_msgs=sub.max_msgs,
    )


# every ConnectionInfo field, in its order: a record is built positionally
_FIELDS = ("cid", "ip", "port", "start_wall_s", "last_activity_wall_s", "account", "kind", "type", "rtt_s",
           "pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "stalls", "subscriptions", "name", "lang",
           "version", "authorized_user", "jwt", "issuer_key", "name_tag", "tls_version", "tls_cipher_suite",
           "tls_first", "stop_wall_s", "reason")
assert tuple(f.name for f in dataclasses.fields(ConnectionInfo)) == _FIELDS


def _values(conn: ClientConnection) -> tuple[Any, ...]:
    jwt_user = conn.jwt_user
    closed = conn.closed
    return (
        conn.cid, conn.ip, conn.port, conn.start_wall_s, conn.last_activity_wall_s, conn.account.name, "Client",
        "websocket" if conn.websocket else "nats", conn.rtt_s, conn.pending_bytes(),
        conn.in_msgs, conn.out_msgs, conn.in_bytes, conn.out_bytes, 0,
        tuple(subscription_info(s, conn.cid) for s in conn.subs.values()) if conn.subs else (),
        conn.name, conn.lang, conn.version, conn.user,
        jwt_user.shown_jwt if jwt_user is not None else "",
        jwt_user.issuer_key if jwt_user is not None else "",
        jwt_user.name_tag if jwt_user is not None else "",
        conn.tls_version, conn.tls_cipher_suite, conn.tls_first,
        conn.stop_wall_s if closed else None,
        conn.close_reason if closed else "",
    )


def connection_info(conn: ClientConnection) -> ConnectionInfo:
    return ConnectionInfo(*_values(conn))


class ClosedConnections:
    """The last `maxlen` closed connections, oldest first, as ConnectionInfo when read. Each record
    becomes a ConnectionInfo once, when it is first read (the newest `_fresh` are still tuples)."""

    def __init__(self, maxlen: int) -> None:
        self._records: deque[tuple[Any, ...] | ConnectionInfo] = deque(maxlen=maxlen)
        self._fresh = 0

    def record(self, conn: ClientConnection) -> None:
        """`conn` closed: keep its values as they are now."""
        self._records.append(_values(conn))
        self._fresh += 1

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ConnectionInfo]:
        records = self._records
        count = len(records)
        for index in range(count - min(self._fresh, count), count):
            records[index] = ConnectionInfo(*records[index])  # type: ignore[misc]
        self._fresh = 0
        return iter(list(records))  # type: ignore[arg-type]
