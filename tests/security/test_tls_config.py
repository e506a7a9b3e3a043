"""The `tls {}` block, the --tls* flags and TLSOptions -> SSLContext (pure: no sockets)."""

from __future__ import annotations

import ssl

import pytest

from appliance.config.flags import apply_flags, parse_run_args
from appliance.config.load import options_from_text
from appliance.config.options import ServerOptions
from appliance.config.tls import TLSOptions
from appliance.config.tls_context import TLSConfigError, client_context, server_context
from appliance.errors import ConfigError
from appliance.testing.certs import TestCerts


def load(text: str) -> ServerOptions:
    return options_from_text(text, filename="t.conf")


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text)
    return caught.value.problems


def test_tls_block_fills_options(certs: TestCerts) -> None:
    options = load(f"""tls {{
        cert_file: "{certs.server.cert}"
        key_file: "{certs.server.key}"
        ca_file: "{certs.ca_file}"
        verify_and_map: true
        timeout: "1.5s"
        handshake_first: true
        min_version: "1.3"
        cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        curve_preferences: [X25519, CurveP256]
    }}""")
    tls = options.tls
    assert tls is not None
    assert (tls.verify, tls.map, tls.timeout_s, tls.handshake_first, tls.min_version) == (True, True, 1.5, True, "1.3")
    assert tls.cipher_suites == ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]
    assert tls.curve_preferences == ["X25519", "CurveP256"]


def test_handshake_first_forms(certs: TestCerts) -> None:
    def first(value: str) -> tuple[bool, float]:
        tls = load(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", '
                   f"handshake_first: {value} }}").tls
        assert tls is not None
        return tls.handshake_first, tls.handshake_first_fallback_s

    assert first("true") == (True, 0.0) and first('"off"') == (False, 0.0)
    assert first('"auto"') == (True, 0.05) and first('"300ms"') == (True, 0.3)
    assert any('field "handshake_first"\'s value "soon" is invalid' in p for p in problems(
        f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", handshake_first: "soon" }}'))


def test_default_is_no_tls_and_timeout_two_seconds(certs: TestCerts) -> None:
    assert load("port: 4222").tls is None
    tls = load(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}" }}').tls
    assert tls is not None and tls.timeout_s == 2.0 and not tls.verify


@pytest.mark.parametrize(("body", "text"), [
    ('verify: "yes"', "error parsing tls config, expected 'verify' to be a boolean"),
    ("cert_file: 1", "error parsing tls config, expected 'cert_file' to be filename"),
    ("bogus: 1", 'error parsing tls config, unknown field "bogus"'),
    ('min_version: "1.1"', "error parsing tls config: unsupported TLS version: TLS 1.1"),
    ("cipher_suites: [NOPE]", "unrecognized cipher NOPE"),
    ("cipher_suites: []", "error parsing tls config, 'cipher_suites' cannot be empty"),
    ("curve_preferences: [P999]", "unrecognized curve preference P999"),
    ("cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]",
     "insecure cipher suites configured without 'allow_insecure_cipher_suites' option set: TLS_RSA_WITH_AES_128_CBC_SHA"),
    ('timeout: "abc"', "error parsing tls config, 'timeout'"),
    ("handshake_first: 5", 'field "handshake_first" should be a boolean or a string, got int64'),
])
def test_bad_tls_values_are_nats_server_errors(certs: TestCerts, body: str, text: str) -> None:
    found = problems(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", {body} }}')
    assert any(text in p for p in found), found


def test_missing_files_are_reported_at_load(certs: TestCerts, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nope.pem"
    found = problems(f'tls {{ cert_file: "{missing}", key_file: "{certs.server.key}" }}')
    assert any(f"error parsing X509 certificate/key pair: open {missing}: no such file or directory" in p
               for p in found), found
    assert any("missing 'key_file' in TLS configuration" in p
               for p in problems(f'tls {{ cert_file: "{certs.server.cert}" }}'))
    assert any("failed to parse root ca certificate" in p for p in problems(
        f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", ca_file: "{certs.server.key}" }}'))


def test_contexts(certs: TestCerts) -> None:
    tls = TLSOptions(cert_file=certs.server.cert, key_file=certs.server.key, ca_file=certs.ca_file, verify=True,
                     min_version="1.3")
    server = server_context(tls)
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server.minimum_version == ssl.TLSVersion.TLSv1_3
    assert server_context(TLSOptions(cert_file=certs.server.cert, key_file=certs.server.key)).verify_mode == ssl.CERT_NONE
    client = client_context(TLSOptions(ca_file=certs.ca_file))
    assert client.verify_mode == ssl.CERT_REQUIRED and client.check_hostname
    with pytest.raises(TLSConfigError, match="missing 'cert_file'"):
        server_context(TLSOptions())


def test_tls_flags_override_the_file(certs: TestCerts) -> None:
    base = load(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", timeout: 5 }}')
    args = parse_run_args(["--tlscert", certs.server.cert, "--tlskey", certs.server.key, "--tlscacert",
                           certs.ca_file, "--tlsverify"])
    tls = apply_flags(ServerOptions(), args).tls
    assert tls is not None and tls.verify and tls.ca_file == certs.ca_file
    assert apply_flags(base, parse_run_args(["-tls=false"])).tls is None
    overridden = apply_flags(base, parse_run_args(["--tls", "--tlscert", certs.server.cert, "--tlskey", certs.server.key]))
    assert overridden.tls is not None and overridden.tls.timeout_s == 2.0  # the file's block is replaced
    with pytest.raises(ConfigError, match="TLS Server certificate must be present and valid"):
        apply_flags(ServerOptions(), parse_run_args(["--tls"]))
    with pytest.raises(ConfigError, match="TLS Server private key must be present and valid"):
        apply_flags(ServerOptions(), parse_run_args(["--tlscert", certs.server.cert]))


def test_auth_timeout_is_tls_timeout_plus_one_unless_given(certs: TestCerts) -> None:
    block = f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}", timeout: 3 }}\n'
    assert load(block).authorization.timeout_s == 4.0
    assert load(block + "authorization { timeout: 5 }").authorization.timeout_s == 5.0
    assert load("port: 4222").authorization.timeout_s == 2.0
    flagged = apply_flags(ServerOptions(), parse_run_args(["--tlscert", certs.server.cert, "--tlskey", certs.server.key]))
    assert flagged.authorization.timeout_s == 3.0
