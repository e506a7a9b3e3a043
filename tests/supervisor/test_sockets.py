"""Listening sockets: opened once, random ports resolved, nats-server's log lines and errors."""

from __future__ import annotations

import logging
import socket

import pytest

from appliance.config.options import ServerOptions
from appliance.errors import StartupError
from appliance.supervisor.sockets import join_host_port, open_listener, open_listeners


def test_random_port_is_bound_and_listening() -> None:
    listener = open_listener("127.0.0.1", -1)
    try:
        port = listener.getsockname()[1]
        assert port > 0
        assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        with socket.create_connection(("127.0.0.1", port), timeout=5.0):
            pass
    finally:
        listener.close()


def test_a_port_in_use_is_a_startup_error_worded_like_nats_server() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartupError) as raised:
            open_listener("127.0.0.1", port)
    assert str(raised.value) == (f'Error listening on port: 127.0.0.1:{port}, '
                                 f'"listen tcp 127.0.0.1:{port}: bind: address already in use"')


def test_client_and_monitor_log_their_real_ports_in_nats_server_order(caplog: pytest.LogCaptureFixture) -> None:
    options = ServerOptions(host="127.0.0.1", port=-1, http_host="127.0.0.1", http_port=-1)
    with caplog.at_level(logging.INFO):
        listeners = open_listeners(options)
    try:
        assert caplog.messages == [f"Starting http monitor on 127.0.0.1:{listeners.http_port}",
                                   f"Listening for client connections on 127.0.0.1:{listeners.client_port}"]
    finally:
        listeners.close()


def test_monitoring_off_opens_no_http_socket() -> None:
    listeners = open_listeners(ServerOptions(host="127.0.0.1", port=-1))
    try:
        assert listeners.http is None and listeners.http_port is None
    finally:
        listeners.close()


def test_a_failed_client_port_closes_the_monitor_socket() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        options = ServerOptions(host="127.0.0.1", port=taken.getsockname()[1], http_host="127.0.0.1", http_port=-1)
        with pytest.raises(StartupError):
            open_listeners(options)


def test_ipv6_literals_are_bracketed_like_go() -> None:
    assert join_host_port("::", 4222) == "[::]:4222"
    assert join_host_port("0.0.0.0", 4222) == "0.0.0.0:4222"
