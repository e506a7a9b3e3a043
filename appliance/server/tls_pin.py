"""`pinned_certs` of a tls block, as nats-server checks it after a handshake (`matchesPinnedCert`
in server/auth.go): the peer's certificate passes when the lower-case hex SHA-256 of its DER
SubjectPublicKeyInfo is in the set; no certificate at all fails.

Python's ssl gives the peer certificate as DER (`getpeercert(binary_form=True)`) but not its
SubjectPublicKeyInfo: `subject_public_key_info` walks the DER to it (Certificate → tbsCertificate
→ the field after subject), enough of X.509 for that and nothing more. Pure: no sockets.
"""

from __future__ import annotations

import hashlib

_SEQUENCE = 0x30
_EXPLICIT_VERSION = 0xA0  # [0] EXPLICIT Version, absent in v1 certificates


class BadCertificate(ValueError):
    """DER that is not an X.509 certificate as far as the walk goes."""


def _element(der: bytes, offset: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at `offset`."""
    if offset + 2 > len(der):
        raise BadCertificate("truncated element header")
    tag = der[offset]
    if tag & 0x1F == 0x1F:
        raise BadCertificate("multi-byte tags are not used in certificates")
    first = der[offset + 1]
    start = offset + 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or start + count > len(der):
            raise BadCertificate("bad length")
        length = int.from_bytes(der[start:start + count], "big")
        start += count
    end = start + length
    if end > len(der):
        raise BadCertificate("element runs past the end")
    return tag, start, end


def subject_public_key_info(der: bytes) -> bytes:
    """The DER SubjectPublicKeyInfo (whole element, tag and length included) of a certificate."""
    tag, cert_start, _ = _element(der, 0)
    if tag != _SEQUENCE:
        raise BadCertificate("a certificate is a SEQUENCE")
    tag, offset, tbs_end = _element(der, cert_start)
    if tag != _SEQUENCE:
        raise BadCertificate("tbsCertificate is a SEQUENCE")
    tag, _, end = _element(der, offset)
    if tag == _EXPLICIT_VERSION:
        offset = end
    # serialNumber, signature, issuer, validity, subject: skipped; then subjectPublicKeyInfo
    for _field in range(5):
        _, _, offset = _element(der, offset)
        if offset > tbs_end:
            raise BadCertificate("tbsCertificate ends early")
    tag, _, end = _element(der, offset)
    if tag != _SEQUENCE or end > tbs_end:
        raise BadCertificate("subjectPublicKeyInfo is a SEQUENCE")
    return der[offset:end]


def key_id(der: bytes) -> str:
    """nats-server's key id of a certificate: hex SHA-256 of its SubjectPublicKeyInfo."""
    return hashlib.sha256(subject_public_key_info(der)).hexdigest()


def pin_failure(pinned: frozenset[str], der: bytes | None) -> str | None:
    """None when the certificate passes `pinned` (empty: no pinning); else nats-server's debug
    line for the failure."""
    if not pinned:
        return None
    if not der:
        return "Failed pinned cert test as client did not provide a certificate"
    try:
        identity = key_id(der)
    except BadCertificate:
        return "Failed pinned cert test as client did not provide a certificate"
    if identity not in pinned:
        return f"Failed pinned cert test for key id: {identity}"
    return None
