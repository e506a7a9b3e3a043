"""A `tls {}` block of a NATS config (top level today; `cluster`, `websocket` and `https` reuse it)
into typed `TLSOptions`, with nats-server's keys, defaults and error texts (`parseTLS` in
server/opts.go).

Pure: no files are read here. `appliance/config/tls_context.py` turns `TLSOptions` into an
`ssl.SSLContext` (and reports missing or bad certificate files, as nats-server's `GenTLSConfig`).

Cipher suites are named as Go names them (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`); the table
below maps each to OpenSSL's name. As in Go, they only choose TLS 1.2 suites: TLS 1.3 suites are
not configurable (Go ignores them for 1.3, and so does OpenSSL's cipher list).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.config.convert import BadValue, as_map, parse_go_duration, type_name
from appliance.config.parser import Entry, Value

TLS_TIMEOUT_S = 2.0  # nats-server TLS_TIMEOUT
TLS_VERSIONS = ("1.2", "1.3")
HANDSHAKE_FIRST_FALLBACK_S = 0.05  # nats-server DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY

# Go's tls.CipherSuites(): name -> OpenSSL name ("" for TLS 1.3 suites: always on, not settable)
SECURE_CIPHER_SUITES: dict[str, str] = {
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# Go's tls.InsecureCipherSuites(): only with `allow_insecure_cipher_suites: true`
INSECURE_CIPHER_SUITES: dict[str, str] = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
}
# OpenSSL name -> Go name, for /connz `tls_cipher_suite` (TLS 1.3 names are the same in both)
GO_CIPHER_NAMES: dict[str, str] = {
    openssl: go for go, openssl in (SECURE_CIPHER_SUITES | INSECURE_CIPHER_SUITES).items() if openssl
}
# Go's curvePreferenceMap -> OpenSSL group name ("" when Python's ssl cannot select it)
CURVES: dict[str, str] = {
    "SecP384r1MLKEM1024": "",
    "SecP256r1MLKEM768": "",
    "X25519MLKEM768": "",
    "X25519": "X25519",
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
}
# keys nats-server knows in a tls block that appliance does not implement
UNSUPPORTED_TLS_KEYS = frozenset({
    "cert_store", "cert_match_by", "cert_match", "ca_certs_match", "cert_match_skip_invalid",
    "ocsp_peer", "certs", "certificates", "connection_rate_limit",
})


@dataclass(slots=True)
class TLSOptions:
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False  # require and verify a client certificate
    map: bool = False  # verify_and_map: the client certificate names the user
    check_known_urls: bool = False  # verify_cert_and_check_known_urls (routes): a DNS name of the peer is a route's host
    insecure: bool = False  # (soliciting side) skip verifying the peer
    timeout_s: float = TLS_TIMEOUT_S
    handshake_first: bool = False  # TLS before INFO
    handshake_first_fallback_s: float = 0.0  # "auto" / a duration: plain INFO if the client says nothing that long
    min_version: str = ""  # "" = 1.2
    cipher_suites: list[str] = field(default_factory=list)  # Go names; [] = Go's defaults (all secure)
    curve_preferences: list[str] = field(default_factory=list)  # Go names; [] = defaults
    allow_insecure_cipher_suites: bool = False
    pinned_certs: frozenset[str] = frozenset()  # hex SHA-256 of a peer's SubjectPublicKeyInfo; empty: any
    files_digest: str = ""  # of the certificate, key and CA files as loaded: a reload sees new file contents


def _bool(key: str, value: Value) -> bool:
    if not isinstance(value.data, bool):
        raise BadValue(value.position, f"error parsing tls config, expected '{key}' to be a boolean")
    return value.data


def _filename(key: str, value: Value) -> str:
    if not isinstance(value.data, str):
        raise BadValue(value.position, f"error parsing tls config, expected '{key}' to be filename")
    return value.data


def _names(key: str, value: Value) -> list[Value]:
    if not isinstance(value.data, list):
        raise BadValue(value.position, f"error parsing tls config, '{key}' wrong type")
    if not value.data:
        raise BadValue(value.position, f"error parsing tls config, '{key}' cannot be empty")
    return value.data


def _timeout(value: Value) -> float:
    data = value.data
    if isinstance(data, bool):
        raise BadValue(value.position, "error parsing tls config, 'timeout' wrong type")
    if isinstance(data, int | float):
        return float(data)
    if isinstance(data, str):
        try:
            return parse_go_duration(data)
        except ValueError as error:
            raise BadValue(value.position, f"error parsing tls config, 'timeout' {error}") from None
    raise BadValue(value.position, "error parsing tls config, 'timeout' wrong type")


def _handshake_first(key: str, value: Value) -> tuple[bool, float]:
    """(TLS first, fallback delay in seconds: 0 = none)."""
    data = value.data
    if isinstance(data, bool):
        return data, 0.0
    if isinstance(data, str):
        lowered = data.lower()
        if lowered in ("true", "on"):
            return True, 0.0
        if lowered in ("false", "off"):
            return False, 0.0
        if lowered in ("auto", "auto_fallback"):
            return True, HANDSHAKE_FIRST_FALLBACK_S
        try:
            return True, parse_go_duration(data)
        except ValueError:
            raise BadValue(value.position, f'field "{key}"\'s value "{data}" is invalid') from None
    raise BadValue(value.position, f'field "{key}" should be a boolean or a string, got {type_name(data)}')


_PINNED_TEXT = "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo"


def _pinned_certs(value: Value) -> frozenset[str]:
    """nats-server's `pinned_certs`: a list of 64 hex digits each (any case); [] pins nothing."""
    if not isinstance(value.data, list):
        raise BadValue(value.position, f"error parsing tls config, expected 'pinned_certs' to be a list of {_PINNED_TEXT}")
    pins: set[str] = set()
    for item in value.data:
        entry = str(item.data).lower()
        if not isinstance(item.data, str) or len(entry) != 64 or entry.strip("0123456789abcdef"):
            raise BadValue(item.position, f"error parsing tls config, 'pinned_certs' key {entry} does not look like {_PINNED_TEXT}")
        pins.add(entry)
    return frozenset(pins)


def _min_version(value: Value) -> str:
    data = value.data
    if not isinstance(data, str):
        raise BadValue(value.position, f"error parsing tls config: 'min_version' wrong type: {data}")
    if data in ("1.0", "1.1"):
        raise BadValue(value.position, f"error parsing tls config: unsupported TLS version: TLS {data}")
    if data not in TLS_VERSIONS:
        raise BadValue(value.position, f"error parsing tls config: unknown version: {data}")
    return data


def parse_tls(entry: Entry, *, client_context: bool = True) -> TLSOptions:
    """The block of `entry`; raises BadValue at the first problem, as nats-server stops there too.
    `client_context`: the block of a port clients connect to (top level, websocket), not `cluster`."""
    block = as_map(entry.key, entry.value)
    tls = TLSOptions()
    insecure: list[str] = []
    for item in block.values():
        key = item.key.lower()
        value = item.value
        if key in ("cert_file", "key_file", "ca_file"):
            setattr(tls, key, _filename(key, value))
        elif key in ("verify", "insecure", "allow_insecure_cipher_suites"):
            setattr(tls, key, _bool(key, value))
        elif key == "verify_and_map":
            tls.map = _bool(key, value)
            tls.verify = tls.verify or tls.map
        elif key == "verify_cert_and_check_known_urls":
            check = _bool(key, value)
            if check and client_context:
                raise BadValue(value.position, "verify_cert_and_check_known_urls not supported in this context")
            tls.check_known_urls = check
            tls.verify = tls.verify or check
        elif key == "timeout":
            tls.timeout_s = _timeout(value)
        elif key in ("handshake_first", "first", "immediate"):
            tls.handshake_first, tls.handshake_first_fallback_s = _handshake_first(item.key, value)
        elif key == "min_version":
            tls.min_version = _min_version(value)
        elif key == "pinned_certs":
            tls.pinned_certs = _pinned_certs(value)
        elif key == "cipher_suites":
            for name_value in _names(key, value):
                name = name_value.data
                if not isinstance(name, str) or name not in SECURE_CIPHER_SUITES | INSECURE_CIPHER_SUITES:
                    raise BadValue(name_value.position, f"unrecognized cipher {name}")
                if name in INSECURE_CIPHER_SUITES:
                    insecure.append(name)
                tls.cipher_suites.append(name)
        elif key == "curve_preferences":
            for name_value in _names(key, value):
                name = name_value.data
                if not isinstance(name, str) or name not in CURVES:
                    raise BadValue(name_value.position, f"unrecognized curve preference {name}")
                tls.curve_preferences.append(name)
        elif key in UNSUPPORTED_TLS_KEYS:
            raise BadValue(item.key_position, f'field "{item.key}" is known to nats-server but not supported by appliance')
        else:
            raise BadValue(item.key_position, f'error parsing tls config, unknown field "{item.key}"')
    if insecure and not tls.allow_insecure_cipher_suites:
        raise BadValue(entry.key_position, "insecure cipher suites configured without 'allow_insecure_cipher_suites' "
                                           f"option set: {', '.join(insecure)}")
    return tls
