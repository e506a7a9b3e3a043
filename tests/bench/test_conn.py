"""The bench client connection's set-up against servers that misbehave."""

import gc
import socket
import sys
import warnings

import pytest

from appliance.bench.conn import Connection, Endpoint


def _collect_earlier_garbage() -> None:
    """What earlier tests of this worker left to the GC (a client library's unclosed transports)
    is collected first, quietly: only this test's own leak may fail it."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gc.collect()
    finally:
        sys.unraisablehook = hook


def test_a_server_that_accepts_but_never_answers_leaks_no_socket() -> None:
    """A stopped (SIGSTOP) server's kernel still accepts connections; the INFO never comes."""
    _collect_earlier_garbage()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            with pytest.raises(TimeoutError):
                Connection(Endpoint.parse(f"nats://127.0.0.1:{port}"), name="t", timeout_s=0.2)
            gc.collect()  # an unclosed socket would warn (an error here) when collected
