"""max_closed_clients (nats-server's option, default 10,000) sizes the ring of closed connections
that /connz?state=closed lists."""

from __future__ import annotations

import time

import pytest

from appliance import limits
from appliance.config import options_from_text
from appliance.config.options import ServerOptions
from appliance.errors import ConfigError
from appliance.testing.inproc import InProcessServer
from appliance.testing.rawclient import RawClient


def test_the_option_loads_as_nats_server_reads_it() -> None:
    assert options_from_text("max_closed_clients: 5\n", filename="t.conf").max_closed_clients == 5
    zero = options_from_text("max_closed_clients: 0\n", filename="t.conf")
    assert zero.max_closed_clients == limits.CLOSED_CONNECTIONS_MAX
    assert options_from_text("port: 4222\n", filename="t.conf").max_closed_clients == 10_000
    with pytest.raises(ConfigError, match="max_closed_clients value can not be negative"):
        options_from_text("max_closed_clients: -1\n", filename="t.conf")


def test_the_closed_ring_keeps_the_last_max_closed_clients() -> None:
    options = ServerOptions()
    options.max_closed_clients = 3
    with InProcessServer(options) as server:
        assert server.server is not None
        cids = []
        for _ in range(5):
            client = RawClient(server.port)
            client.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
            client.read_until(b"PONG\r\n")
            cids.append(max(server.server.clients))
            client.close()
        deadline = time.monotonic() + 5
        while server.server.clients:
            assert time.monotonic() < deadline, "the connections did not close"
            time.sleep(0.01)
        assert [c.cid for c in server.server.closed_clients] == cids[-3:]


def test_a_closed_record_reads_as_the_connection_was_when_it_closed() -> None:
    """The ring keeps plain values and makes ConnectionInfo when read: the same fields as
    connection_info of the connection at its close, and later changes to the object do not show."""
    from types import SimpleNamespace

    from appliance.server.conn_info import ClosedConnections, connection_info
    from appliance.server.sublist import Subscription

    jwt_user = SimpleNamespace(shown_jwt="eyJ", issuer_key="AISSUER", name_tag="acct")
    conn = SimpleNamespace(
        cid=7, ip="10.0.0.1", port=5555, start_wall_s=1.5, last_activity_wall_s=2.5,
        account=SimpleNamespace(name="A"), websocket=True, rtt_s=0.25, pending_bytes=lambda: 12,
        in_msgs=1, out_msgs=2, in_bytes=3, out_bytes=4, subs={}, name="n", lang="python", version="2.0",
        user="bob", jwt_user=jwt_user, tls_version="1.3", tls_cipher_suite="TLS_AES_128_GCM_SHA256",
        tls_first=True, closed=True, stop_wall_s=3.5, close_reason="Client Closed")
    conn.subs = {b"1": Subscription(conn, b"foo", b"q", b"1", "A")}  # type: ignore[arg-type]
    expected = connection_info(conn)  # type: ignore[arg-type]
    assert expected.subscriptions[0].subject == "foo" and expected.type == "websocket" and expected.jwt == "eyJ"
    ring = ClosedConnections(2)
    ring.record(conn)  # type: ignore[arg-type]
    conn.in_msgs = 99
    conn.subs = {}
    assert list(ring) == [expected] and len(ring) == 1
    for cid in (8, 9):
        conn.cid = cid
        ring.record(conn)  # type: ignore[arg-type]
    assert [c.cid for c in ring] == [8, 9]
    assert all(c.in_msgs == 99 and c.subscriptions == () for c in ring)
