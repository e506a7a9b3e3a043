"""verify_and_map's choice of user, and the handshake error texts (pure: no sockets)."""

from __future__ import annotations

import ssl

from hypothesis import given
from hypothesis import strategies as st

from appliance.server.tls import handshake_error_text
from appliance.server.tls_map import identity_from_cert, map_user, parse_dn

CERT = {
    "subject": ((("countryName", "US"),), (("organizationName", "Acme"),), (("organizationalUnitName", "eng"),),
                (("commonName", "alice"),)),
    "subjectAltName": (("DNS", "alice.example.com"), ("email", "alice@example.com"), ("URI", "spiffe://acme/alice")),
}


def test_subject_is_printed_as_go_prints_it() -> None:
    identity = identity_from_cert(CERT)
    assert identity.subject == "CN=alice,OU=eng,O=Acme,C=US"
    assert identity.emails == ("alice@example.com",)
    assert identity.dns_names == ("alice.example.com",)
    assert identity.uris == ("spiffe://acme/alice",)


def test_order_of_matching_is_nats_servers() -> None:
    identity = identity_from_cert(CERT)
    everyone = {"alice@example.com": 1, "alice.example.com": 2, "spiffe://acme/alice": 3,
                "CN=alice,OU=eng,O=Acme,C=US": 4}
    assert map_user(identity, everyone) == 1  # e-mail first
    assert map_user(identity, {k: v for k, v in everyone.items() if v > 1}) == 2  # then DNS names
    assert map_user(identity, {k: v for k, v in everyone.items() if v > 2}) == 3  # then URIs
    assert map_user(identity, {"CN=alice,OU=eng,O=Acme,C=US": 4}) == 4  # then the subject
    assert map_user(identity, {"C=US,O=Acme,OU=eng,CN=alice": 5}) == 5  # same attributes, other order
    assert map_user(identity, {"cn=alice, ou=eng, o=Acme, c=US": 6}) == 6  # types are case-insensitive
    assert map_user(identity, {"CN=bob": 7, "nobody": 8}) is None
    assert map_user(identity_from_cert({}), everyone) is None


def test_domain_components_are_appended() -> None:
    cert = {"subject": ((("domainComponent", "org"),), (("domainComponent", "acme"),), (("commonName", "svc"),))}
    identity = identity_from_cert(cert)
    assert identity.subject == "CN=svc"
    assert identity.domain_components == "DC=acme,DC=org"
    assert map_user(identity, {"CN=svc,DC=acme,DC=org": "x"}) == "x"


def test_special_characters_are_escaped_and_parsed_back() -> None:
    cert = {"subject": ((("organizationName", "Acme, Inc."),), (("commonName", "a+b"),))}
    identity = identity_from_cert(cert)
    assert identity.subject == "CN=a\\+b,O=Acme\\, Inc."
    assert parse_dn(identity.subject) == (("CN", "a+b"), ("O", "Acme, Inc."))
    assert map_user(identity, {identity.subject: 1}) == 1


@given(st.lists(st.tuples(st.sampled_from(["commonName", "organizationName", "localityName"]),
                          st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=8)
                          .filter(lambda v: v == v.strip())), min_size=1, max_size=4))
def test_any_subject_maps_to_itself(attributes: list[tuple[str, str]]) -> None:
    cert = {"subject": tuple(((name, value),) for name, value in attributes)}
    identity = identity_from_cert(cert)
    assert map_user(identity, {identity.subject: "me"}) == "me"


def test_handshake_errors_read_as_go_writes_them() -> None:
    error = ssl.SSLError(1, "[SSL: PEER_DID_NOT_RETURN_A_CERTIFICATE] peer did not return a certificate")
    error.reason = "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert handshake_error_text(error) == ("tls: client didn't provide a certificate", False)
    probe = ssl.SSLError(1, "wrong version number")
    probe.reason = "WRONG_VERSION_NUMBER"
    assert handshake_error_text(probe) == ("tls: first record does not look like a TLS handshake", True)
    assert handshake_error_text(None) == ("EOF", True)
    assert handshake_error_text(ConnectionResetError()) == ("EOF", True)
