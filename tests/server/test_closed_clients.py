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
