"""`pinned_certs` (pure): the SubjectPublicKeyInfo of a DER certificate, nats-server's key id and
debug lines, and the config block's values and errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given, strategies as st

from appliance.config.load import options_from_text
from appliance.errors import ConfigError
from appliance.server.tls_pin import BadCertificate, key_id, pin_failure, subject_public_key_info
from appliance.testing.certs import TestCerts


def der_and_spki(pem: bytes) -> tuple[bytes, bytes]:
    cert = x509.load_pem_x509_certificate(pem)
    return (cert.public_bytes(serialization.Encoding.DER),
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


@pytest.mark.parametrize("key_type", [trustme.KeyType.ECDSA, trustme.KeyType.RSA])
def test_spki_of_leaf_and_ca_certificates(key_type: trustme.KeyType) -> None:
    ca = trustme.CA(key_type=key_type)
    leaf = ca.issue_cert("127.0.0.1", "alice.example.com", key_type=key_type)
    for pem in (leaf.cert_chain_pems[0].bytes(), ca.cert_pem.bytes()):
        der, spki = der_and_spki(pem)
        assert subject_public_key_info(der) == spki
        assert key_id(der) == hashlib.sha256(spki).hexdigest()


@given(st.binary(max_size=300))
def test_any_bytes_are_a_certificate_or_refused_cleanly(data: bytes) -> None:
    try:
        spki = subject_public_key_info(data)
    except BadCertificate:
        return
    assert spki and spki[0] == 0x30 and spki in data


@given(st.integers(min_value=0, max_value=600))
def test_a_truncated_certificate_is_refused(cut: int) -> None:
    der, _spki = der_and_spki(trustme.CA().cert_pem.bytes())
    if cut >= len(der):
        return
    with pytest.raises(BadCertificate):
        subject_public_key_info(der[:cut])


def test_pin_failure_lines_as_nats_server(certs: TestCerts) -> None:
    der, _spki = der_and_spki(Path(certs.server.cert).read_bytes())
    identity = key_id(der)
    assert pin_failure(frozenset(), None) is None  # no pinning
    assert pin_failure(frozenset({identity}), der) is None
    assert pin_failure(frozenset({"0" * 64}), der) == f"Failed pinned cert test for key id: {identity}"
    assert pin_failure(frozenset({identity}), None) == "Failed pinned cert test as client did not provide a certificate"


def tls_text(certs: TestCerts, body: str) -> str:
    return f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", {body} }}'


def test_pinned_certs_are_lower_cased_and_kept(certs: TestCerts) -> None:
    pin = "AB" * 32
    options = options_from_text(tls_text(certs, f'pinned_certs: ["{pin}", "{"0" * 64}"]'), filename="t.conf")
    assert options.tls is not None
    assert options.tls.pinned_certs == frozenset({"ab" * 32, "0" * 64})
    cluster = options_from_text(f'cluster {{ port: -1, {tls_text(certs, f"pinned_certs: [{pin}]")} }}', filename="t.conf")
    assert cluster.cluster.tls is not None and cluster.cluster.tls.pinned_certs == frozenset({"ab" * 32})


@pytest.mark.parametrize(("body", "text"), [
    ('pinned_certs: "ab"', "error parsing tls config, expected 'pinned_certs' to be a list of hex-encoded sha256 "
                           "of DER encoded SubjectPublicKeyInfo"),
    ('pinned_certs: ["XYZ"]', "error parsing tls config, 'pinned_certs' key xyz does not look like hex-encoded "
                              "sha256 of DER encoded SubjectPublicKeyInfo"),
    (f'pinned_certs: ["{"a" * 63}"]', f"'pinned_certs' key {'a' * 63} does not look like"),
])
def test_bad_pinned_certs_are_nats_server_errors(certs: TestCerts, body: str, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        options_from_text(tls_text(certs, body), filename="t.conf")
    assert any(text in problem for problem in caught.value.problems), caught.value.problems
