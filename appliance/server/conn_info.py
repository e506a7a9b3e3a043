"""A client connection as the monitoring contract shows it (`monitor/view.py` ConnectionInfo).

The server records a connection this way the moment it closes (its bounded ring of closed
connections, nats-server's max_closed_clients), so /connz?state=closed reads small immutable records
rather than keeping whole connections — buffers, parser, transport — alive for 10,000 closes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def connection_info(conn: ClientConnection) -> ConnectionInfo:
    return ConnectionInfo(
        cid=conn.cid,
        ip=conn.ip,
        port=conn.port,
        start_wall_s=conn.start_wall_s,
        last_activity_wall_s=conn.last_activity_wall_s,
        account=conn.account.name,
        type="websocket" if conn.websocket else "nats",
        rtt_s=conn.rtt_s,
        pending_bytes=conn.pending_bytes(),
        in_msgs=conn.in_msgs,
        out_msgs=conn.out_msgs,
        in_bytes=conn.in_bytes,
        out_bytes=conn.out_bytes,
        subscriptions=tuple(subscription_info(s, conn.cid) for s in conn.subs.values()),
        name=conn.name,
        lang=conn.lang,
        version=conn.version,
        authorized_user=conn.user,
        jwt=conn.jwt_user.shown_jwt if conn.jwt_user is not None else "",
        issuer_key=conn.jwt_user.issuer_key if conn.jwt_user is not None else "",
        name_tag=conn.jwt_user.name_tag if conn.jwt_user is not None else "",
        tls_version=conn.tls_version,
        tls_cipher_suite=conn.tls_cipher_suite,
        tls_first=conn.tls_first,
        stop_wall_s=conn.stop_wall_s if conn.closed else None,
        reason=conn.close_reason if conn.closed else "",
    )
