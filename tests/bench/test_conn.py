"""The bench client connection's set-up against servers that misbehave."""

import gc
import socket
import warnings

import pytest

from appliance.bench.conn import Connection, Endpoint


def test_a_server_that_accepts_but_never_answers_leaks_no_socket() -> None:
    """A stopped (SIGSTOP) server's kernel still accepts connections; the INFO never comes."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            with pytest.raises(TimeoutError):
                Connection(Endpoint.parse(f"nats://127.0.0.1:{port}"), name="t", timeout_s=0.2)
            gc.collect()  # an unclosed socket would warn (an error here) when collected
