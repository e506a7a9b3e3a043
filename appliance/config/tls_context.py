"""`TLSOptions` -> `ssl.SSLContext`, as nats-server's `GenTLSConfig` (server/opts.go) builds its
tls.Config: TLS 1.2 at least, the configured cipher suites and curves, a client certificate
required and verified with `verify`, `ca_file` as the trusted roots.

One builder for every listener and link: the client port (`server_context`), and the accepting
and soliciting ends of a route (`server_context` / `client_context`), so a route link reuses it
as is. Every worker builds its own contexts from the options it was given (a context holds an
OpenSSL handle and is not shared between processes).

Errors are `TLSConfigError` with nats-server's texts; `load.py` reports them at the `tls` key.
The TLS 1.3 suites get Go's order (AES-128-GCM first), which Python's ssl has no call for,
through config/tls13_order.py. What Python's ssl cannot do (as of 3.11): choose TLS 1.3 groups
and order curves — only the first curve_preferences entry that OpenSSL names is used for TLS 1.2 ECDHE; the post-quantum hybrids
are accepted in the config and skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import ssl

from appliance.config.tls import CURVES, GO_CIPHER_NAMES, INSECURE_CIPHER_SUITES, SECURE_CIPHER_SUITES, TLSOptions
from appliance.config.tls13_order import apply_go_tls13_order

_VERSIONS = {"": ssl.TLSVersion.TLSv1_2, "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.3 session tickets a server sends after a handshake: Go's crypto/tls sends one (in its first
# flight), OpenSSL two by default; each costs the server and the client a ticket's encryption
GO_SESSION_TICKETS = 1
_VERSION_NAMES = {"TLSv1": "1.0", "TLSv1.1": "1.1", "TLSv1.2": "1.2", "TLSv1.3": "1.3"}


class TLSConfigError(Exception):
    """A TLS block that cannot become a context (missing files, bad PEM, bad combination)."""


def _open_error(path: str) -> str:
    return f"open {path}: no such file or directory"


def _load_pair(context: ssl.SSLContext, tls: TLSOptions) -> None:
    if tls.cert_file and not tls.key_file:
        raise TLSConfigError("missing 'key_file' in TLS configuration")
    if tls.key_file and not tls.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    if not tls.cert_file:
        return
    for path in (tls.cert_file, tls.key_file):
        if not os.path.exists(path):
            raise TLSConfigError(f"error parsing X509 certificate/key pair: {_open_error(path)}")
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as error:
        raise TLSConfigError(f"error parsing X509 certificate/key pair: {getattr(error, 'reason', None) or error}") from None


def _load_ca(context: ssl.SSLContext, tls: TLSOptions) -> None:
    if not tls.ca_file:
        return
    if not os.path.exists(tls.ca_file):
        raise TLSConfigError(_open_error(tls.ca_file))
    try:
        context.load_verify_locations(cafile=tls.ca_file)
    except (ssl.SSLError, OSError):
        raise TLSConfigError("failed to parse root ca certificate") from None


def _apply_common(context: ssl.SSLContext, tls: TLSOptions) -> None:
    context.minimum_version = _VERSIONS[tls.min_version]
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    apply_go_tls13_order(context)  # AES-128-GCM first, as Go's server picks (config/tls13_order.py)
    if tls.cipher_suites:
        table = SECURE_CIPHER_SUITES | INSECURE_CIPHER_SUITES
        names = [table[name] for name in tls.cipher_suites if table[name]]
        if names:
            try:
                context.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise TLSConfigError(f"none of the cipher suites {', '.join(tls.cipher_suites)} is available") from None
        elif tls.min_version != "1.3":
            context.minimum_version = ssl.TLSVersion.TLSv1_3  # only 1.3 suites named: 1.2 has none left
    for name in tls.curve_preferences:
        group = CURVES[name]
        if group:
            try:
                context.set_ecdh_curve(group)
            except (ValueError, ssl.SSLError):
                continue
            break


def server_context(tls: TLSOptions) -> ssl.SSLContext:
    """The accepting side: our certificate; with `verify`, a client certificate signed by ca_file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_common(context, tls)
    context.num_tickets = GO_SESSION_TICKETS
    _load_pair(context, tls)
    if not tls.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    _load_ca(context, tls)
    if tls.verify:
        context.verify_mode = ssl.CERT_REQUIRED
        if not tls.ca_file:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context


def https_context(tls: TLSOptions) -> ssl.SSLContext:
    """The monitoring port over TLS (`https_port`): the client port's certificate, and no client
    certificate asked for, as nats-server's monitor does (browsers and curl have none)."""
    return server_context(dataclasses.replace(tls, verify=False, map=False))


def client_context(tls: TLSOptions) -> ssl.SSLContext:
    """The soliciting side (a route to another server): our certificate when given, the peer's
    verified against ca_file (or the system roots) unless `insecure`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_common(context, tls)
    _load_pair(context, tls)
    if tls.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif tls.ca_file:
        _load_ca(context, tls)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


def route_contexts(tls: TLSOptions) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(accepting, soliciting) contexts of `cluster { tls }`. As nats-server's getTLSConfig for
    routes: a peer certificate is always required and verified (mutual TLS whatever `verify`
    says), and ca_file is the trusted root for both directions."""
    mutual = dataclasses.replace(tls, verify=True)
    return server_context(mutual), client_context(mutual)


def files_digest(tls: TLSOptions) -> str:
    """A digest of the files the block names, as read now: equal options with new certificate
    files in the same paths differ by it (nats-server compares the loaded certificates on reload)."""
    digest = hashlib.sha256()
    for path in (tls.cert_file, tls.key_file, tls.ca_file):
        digest.update(path.encode() + b"\0")
        if path and os.path.exists(path):
            with open(path, "rb") as file:
                digest.update(file.read())
    return digest.hexdigest()


def version_name(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> str:
    """nats-server's `tls_version` text: "1.2", "1.3"."""
    version = ssl_object.version() or ""
    return _VERSION_NAMES.get(version, version)


def cipher_name(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> str:
    """The negotiated suite as Go names it (`tls_cipher_suite` in /connz)."""
    cipher = ssl_object.cipher()
    if cipher is None:
        return ""
    return GO_CIPHER_NAMES.get(cipher[0], cipher[0])
