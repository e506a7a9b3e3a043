"""Route `verify_and_map` (nats-server's isRouterAuthorized with cluster TLSMap), no sockets: the
accepted peer's certificate must offer the cluster `authorization` user among its e-mail
addresses, DNS names, URIs or subject, as a literal string; the password is not asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from appliance.fabric.route import dns_name_matches
from appliance.server.reload import apply_reload
from appliance.server.tls_map import PeerIdentity, literal_names
from tests.server.test_route_reload_unit import Pair, options

# cluster tls verify_and_map needs certificate files; the unit sets what the TLS layer would
MAPPED = 'authorization { user: "CN=route,O=Acme" }'


def accepted(peer_names: tuple[str, ...] | None, user_password: tuple[str, str] = ("", ""),
             then: Callable[[Pair], None] | None = None) -> Pair:
    """Host 1 accepts host 0's route; `then` runs inside the same event loop."""
    async def scenario() -> Pair:
        pair = Pair(MAPPED, *user_password, peer_names=peer_names)
        pair.managers[1].settings.tls_map = True
        await pair.start()
        if then is not None:
            then(pair)
        return pair

    return asyncio.run(scenario())


def test_certificate_naming_the_cluster_user_is_let_in_without_a_password() -> None:
    pair = accepted(("route@example.com", "localhost", "CN=route,O=Acme"))
    assert "ID0" in pair.managers[1].peers and not pair.acceptor.closed


def test_certificate_naming_someone_else_is_refused_even_with_the_password() -> None:
    pair = accepted(("localhost", "CN=other,O=Acme"), ("CN=route,O=Acme", ""))
    assert pair.acceptor.closed and pair.acceptor.close_reason == "Authentication Failure"
    assert "ID0" not in pair.managers[1].peers


def test_no_certificate_names_is_refused() -> None:
    assert accepted(None).acceptor.closed
    assert accepted(()).acceptor.closed


def test_a_reload_that_changes_the_cluster_user_closes_the_mapped_route() -> None:
    def reload(pair: Pair) -> None:
        assert "ID0" in pair.managers[1].peers
        apply_reload(pair.servers[1], options("h1", 'authorization { user: "CN=someone,O=Acme" }'))
        assert b"-ERR 'Authorization Violation'" in pair.pump()

    assert accepted(("CN=route,O=Acme",), then=reload).acceptor.closed


def test_literal_names_in_nats_servers_order() -> None:
    identity = PeerIdentity(emails=("a@x",), dns_names=("h.x",), uris=("spiffe://x/a",), subject="CN=a,O=X",
                            domain_components="DC=x,DC=org")
    assert literal_names(identity) == ("a@x", "h.x", "spiffe://x/a", "CN=a,O=X,DC=x,DC=org", "CN=a,O=X")
    assert literal_names(PeerIdentity()) == ()


def test_dns_name_matching_of_nats_server() -> None:
    assert dns_name_matches("node1.example.com", ("NODE1.example.com",))
    assert dns_name_matches("*.example.com", ("node1.example.com",))
    assert not dns_name_matches("*.example.com", ("a.b.example.com",))  # one label only
    assert not dns_name_matches("node.*.com", ("node.example.com",))  # only left-most
    assert not dns_name_matches("node1.example.com", ("node2.example.com", "example.com"))


def test_check_known_urls_takes_a_dns_name_of_a_configured_route_host() -> None:
    """verify_cert_and_check_known_urls without verify_and_map: only DNS names count."""
    async def scenario(dns_names: tuple[str, ...]) -> Pair:
        pair = Pair(peer_names=(*dns_names, "CN=route.example.com"), peer_dns_names=dns_names)
        settings = pair.managers[1].settings
        settings.check_known_urls, settings.known_hosts = True, ("route.example.com",)
        await pair.start()
        return pair

    assert "ID0" in asyncio.run(scenario(("*.example.com",))).managers[1].peers
    assert asyncio.run(scenario(("other.example.org",))).acceptor.closed
    assert asyncio.run(scenario(())).acceptor.closed  # the subject names the host: not a DNS name
