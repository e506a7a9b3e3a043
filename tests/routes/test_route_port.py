"""The route port against bad peers, compared with nats-server 2.15.1: the same bytes get the same
-ERR (or silence) and a closed connection, and the route port keeps serving; cluster name mismatch,
duplicate server_name and route auth end in a clear log line and no crash loop."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import nats
import pytest

from appliance.testing.process import free_port
from tests.routes.conftest import Node, make_node, mesh_ready, run, wait_until

pytestmark = pytest.mark.integration

BAD_PEERS = {
    "garbage": b"GARBAGE\r\n",
    "client_pub": b"PUB foo 2\r\nhi\r\n",
    "info_before_connect": b'INFO {"server_id":"X"}\r\n',
    "client_connect": b'CONNECT {"lang":"python","verbose":false,"pedantic":false}\r\n',
    "cluster_mismatch": b'CONNECT {"cluster":"C2","name":"X","headers":true}\r\nINFO {"server_id":"X","cluster":"C2"}\r\n',
    "duplicate_name": b'CONNECT {"cluster":"C1","name":"Y"}\r\nINFO {"server_id":"Y","server_name":"same","cluster":"C1"}\r\n',
    "garbage_after_connect": b'CONNECT {"cluster":"C1","name":"Z"}\r\nINFO {"server_id":"Z","server_name":"z","cluster":"C1"}\r\nBOGUS\r\n',
}


def exchange(port: int, payload: bytes) -> list[bytes]:
    """Send `payload` as a route peer; the lines the server answers until it closes (its INFO, PINGs and
    interest left out: each server has its own)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5)
        sock.sendall(payload)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                data += b"<still open>"
                break
            if not chunk:
                break
            data += chunk
    return [line for line in data.split(b"\r\n") if line and not line.startswith((b"INFO", b"PING", b"PONG", b"RS+"))]


@pytest.fixture
def both(tmp_path: Path, cluster_nodes: list[Node]) -> tuple[Node, Node]:
    ports = {"same": free_port(), "go": free_port()}
    ours = make_node(tmp_path, "same", "appliance", ports, routes=[], workers=1)
    go = make_node(tmp_path, "go", "go", {**ports, "go": ports["go"]}, routes=[])
    go.config.write_text(go.config.read_text().replace("server_name=go", "server_name=same"))
    for node in (ours, go):
        cluster_nodes.append(node.start())
    return ours, go


@pytest.mark.parametrize("case", list(BAD_PEERS))
def test_bad_route_peers_answered_as_nats_server(both: tuple[Node, Node], case: str) -> None:
    ours, go = both
    expected = exchange(go.cluster_port, BAD_PEERS[case])
    assert exchange(ours.cluster_port, BAD_PEERS[case]) == expected
    # the route port keeps serving: a well-behaved peer still gets INFO
    with socket.create_connection(("127.0.0.1", ours.cluster_port), timeout=5) as sock:
        assert sock.recv(4096).startswith(b"INFO {")
    assert "Traceback" not in ours.log()


def test_cluster_name_mismatch_and_duplicate_name_are_refused_without_a_crash_loop(
        tmp_path: Path, cluster_nodes: list[Node]) -> None:
    ports = {"a1": free_port(), "a2": free_port(), "a3": free_port()}
    a1 = make_node(tmp_path, "a1", "appliance", ports, routes=["a2", "a3"], workers=1)
    a2 = make_node(tmp_path, "a2", "appliance", ports, routes=[], workers=1, cluster_name="OTHER")
    a3 = make_node(tmp_path, "a3", "appliance", ports, routes=[], workers=1)
    a3.config.write_text(a3.config.read_text().replace("server_name=a3", "server_name=a1"))
    for node in (a1, a2, a3):
        cluster_nodes.append(node.start())
    wait_until(lambda: 'cluster name "OTHER" does not match "C1"' in a1.log(), "a1 refusing OTHER")
    wait_until(lambda: "duplicate name" in a3.log() or "duplicate name" in a1.log(), "duplicate server_name")
    time.sleep(2.5)  # a1 keeps retrying (explicit routes), nobody dies
    for node in (a1, a2, a3):
        assert node.process.process.poll() is None  # type: ignore[union-attr]
        assert "route connection created" not in node.log()
        assert "Traceback" not in node.log()


@pytest.mark.parametrize("dialler", ["appliance", "go"])
def test_route_authorization(tmp_path: Path, cluster_nodes: list[Node], dialler: str) -> None:
    """cluster { authorization }: a peer without the credentials is refused (Authorization Violation),
    one dialling nats-route://user:pass@host:port gets in; across both kinds of server."""
    ports = {"guarded": free_port(), "good": free_port(), "bad": free_port()}
    auth = "  authorization { user: ruser, password: rpass }"
    guarded = make_node(tmp_path, "guarded", "appliance" if dialler == "go" else "go", ports, routes=[],
                        workers=1, cluster_extra=auth)
    good = make_node(tmp_path, "good", dialler, ports, routes=["guarded"], workers=1, cluster_extra=auth,
                     route_userinfo="ruser:rpass@")
    bad = make_node(tmp_path, "bad", dialler, ports, routes=["guarded"], workers=1)
    for node in (guarded, good, bad):
        cluster_nodes.append(node.start())

    async def scenario() -> None:
        clients = [await nats.connect(node.url) for node in (guarded, good)]
        await mesh_ready(clients)
        for nc in clients:
            await nc.close()

    run(scenario)
    wait_until(lambda: "Authorization Violation" in bad.log() or "authentication error" in guarded.log(),
               "the peer without credentials refused")
    assert "Traceback" not in guarded.log() + bad.log()
