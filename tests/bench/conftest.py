"""Shared for the bench tests: a real nats-server."""

from collections.abc import Iterator

import pytest

from appliance.bench import servers


@pytest.fixture(scope="module")
def nats_server() -> Iterator[servers.RunningServer]:
    """A real nats-server 2.15.1 with JetStream, on a free 127.0.0.1 port, for this module."""
    server = servers.start(servers.NATS_DEFAULT)
    try:
        yield server
    finally:
        server.stop()
