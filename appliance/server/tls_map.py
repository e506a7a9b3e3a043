"""`verify_and_map`: which configured user a client certificate names (nats-server's
`checkClientTLSCertSubject` in server/auth.go).

Pure: takes the certificate as Python's `ssl` decodes it (`SSLObject.getpeercert()`), no sockets.
The order nats-server tries: each e-mail address, each DNS name and each URI of the certificate
as a user name; then the subject as a distinguished name (equal, or the same attributes in any
order) against every user name that parses as one; then the subject as Go prints it
(`CN=...,OU=...,O=...`), with the domain components appended when there are any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

UserT = TypeVar("UserT")

# Python's attribute names -> the short names of RFC 4514 / Go's pkix
_SHORT = {
    "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET",
    "postalCode": "POSTALCODE", "organizationName": "O", "organizationalUnitName": "OU", "commonName": "CN",
    "serialNumber": "SERIALNUMBER", "domainComponent": "DC", "userId": "UID", "emailAddress": "E",
}
# the attributes Go's Name.ToRDNSequence keeps, in its order (printed reversed)
_GO_ORDER = ("C", "ST", "L", "STREET", "POSTALCODE", "O", "OU", "CN", "SERIALNUMBER")
_SPECIAL = ',+"\\<>;'


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """What a client certificate can be mapped by."""

    emails: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    uris: tuple[str, ...] = ()
    dn: tuple[tuple[str, str], ...] = ()  # (short type, value), RFC 4514 order (last RDN of the cert first)
    subject: str = ""  # as Go's Subject.String()
    domain_components: str = ""  # "DC=a,DC=b" as nats-server appends them; "" when none


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _SPECIAL else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def identity_from_cert(cert: Mapping[str, Any]) -> PeerIdentity:
    """The identity of a certificate in `getpeercert()` form."""
    attributes: list[tuple[str, str]] = []
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            attributes.append((_SHORT.get(name, name), value))
    by_type: dict[str, list[str]] = {}
    for short, value in attributes:
        by_type.setdefault(short, []).append(value)
    rdns = ["+".join(f"{short}={_escape(v)}" for v in by_type[short]) for short in _GO_ORDER if short in by_type]
    subject = ",".join(reversed(rdns))
    dcs = ",".join(f"DC={v}" for short, v in reversed(attributes) if short == "DC")
    emails, dns_names, uris = [], [], []
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "email":
            emails.append(value)
        elif kind == "DNS":
            dns_names.append(value)
        elif kind == "URI":
            uris.append(value)
    return PeerIdentity(emails=tuple(emails), dns_names=tuple(dns_names), uris=tuple(uris),
                        dn=tuple(reversed(attributes)), subject=subject, domain_components=dcs)


def parse_dn(text: str) -> tuple[tuple[str, str], ...] | None:
    """An RFC 4514 distinguished name as (TYPE, value) pairs; None when `text` is not one."""
    pairs: list[tuple[str, str]] = []
    current: list[str] = []
    parts: list[str] = []
    escaped = False
    for c in text:
        if escaped:
            current.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ",+":
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    for part in parts:
        kind, equals, value = part.partition("=")
        kind = kind.strip()
        if not equals or not kind or not (kind.isalnum() or kind.replace(".", "").isdigit()):
            return None
        pairs.append((kind.upper(), value.strip()))
    return tuple(pairs)


def _same(a: Sequence[tuple[str, str]], b: Sequence[tuple[str, str]]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def map_user(identity: PeerIdentity, users: Mapping[str, UserT]) -> UserT | None:
    """The user the certificate names, or None."""
    for name in (*identity.emails, *identity.dns_names, *identity.uris):
        if name in users:
            return users[name]
    if identity.dn:
        reordered = None
        wanted = sorted(identity.dn)
        for name, user in users.items():
            dn = parse_dn(name)
            if dn is None:
                continue
            if _same(dn, identity.dn):
                return user
            if reordered is None and sorted(dn) == wanted:
                reordered = user
        if reordered is not None:
            return reordered
    if identity.domain_components:
        with_dcs = ",".join(p for p in (identity.subject, identity.domain_components) if p)
        if with_dcs in users:
            return users[with_dcs]
    return users.get(identity.subject) if identity.subject else None


def literal_names(identity: PeerIdentity) -> tuple[str, ...]:
    """The names a certificate offers as they are, in nats-server's order: e-mail addresses, DNS
    names, URIs, the subject with its domain components, the subject. A route's `verify_and_map`
    takes the certificate when one of them is the cluster `authorization` user (isRouterAuthorized:
    string equality, no reordered distinguished names)."""
    names = [*identity.emails, *identity.dns_names, *identity.uris]
    if identity.domain_components:
        names.append(",".join(p for p in (identity.subject, identity.domain_components) if p))
    if identity.subject:
        names.append(identity.subject)
    return tuple(names)
