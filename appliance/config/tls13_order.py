"""Go's order of the TLS 1.3 cipher suites on an `ssl.SSLContext`.

Go's crypto/tls (nats-server) does not let the TLS 1.3 suites be configured; with AES hardware
and a client that offers AES-GCM first (OpenSSL, Go, nats-py, nats.js do) it picks
TLS_AES_128_GCM_SHA256. OpenSSL's default order puts TLS_AES_256_GCM_SHA384 first, so with the
server's preference (OP_CIPHER_SERVER_PREFERENCE, as Go's server decides) appliance negotiated
AES-256 with SHA-384 where nats-server negotiates AES-128 with SHA-256: a different
`tls_cipher_suite` in /connz, and a dearer handshake (the TLS 1.3 key schedule and transcript
run on SHA-384, which SHA extensions of x86 CPUs do not speed up; ~8 % of OpenSSL's server-side
handshake here).

Python's ssl (3.11) has no call for the TLS 1.3 suites (`set_ciphers` is TLS 1.2 only), so this
calls OpenSSL's SSL_CTX_set_ciphersuites through ctypes, on the SSL_CTX the context holds (the
first field after the object header of CPython's PySSLContext). The pointer is checked before it
is used — OpenSSL must report the context's own options for it — and the order is checked after;
when anything does not fit (another ssl build, LibreSSL, another layout) the context keeps
OpenSSL's order and `apply_go_tls13_order` says so by returning False. Not reproduced: Go's
choice of ChaCha20 for a client that lists it first, or on a CPU without AES instructions.
"""

from __future__ import annotations

import _ssl
import ctypes
import ssl

GO_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_SUITES_TEXT = ":".join(GO_TLS13_SUITES).encode()


def _openssl() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(_ssl.__file__)  # dlsym through it reaches the libssl the module uses
        set_suites = lib.SSL_CTX_set_ciphersuites
        get_options = lib.SSL_CTX_get_options
    except (OSError, AttributeError):
        return None
    set_suites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    set_suites.restype = ctypes.c_int
    get_options.argtypes = [ctypes.c_void_p]
    get_options.restype = ctypes.c_uint64
    return lib


_LIB = _openssl()


def _ssl_ctx_pointer(context: ssl.SSLContext) -> int | None:
    """The context's SSL_CTX*, when OpenSSL confirms it (it reports the context's options)."""
    if _LIB is None:
        return None
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer or _LIB.SSL_CTX_get_options(pointer) != int(context.options):
        return None
    return int(pointer)


def apply_go_tls13_order(context: ssl.SSLContext) -> bool:
    """Give `context` Go's TLS 1.3 suite order; False when it keeps OpenSSL's (see the module)."""
    pointer = _ssl_ctx_pointer(context)
    if pointer is None or _LIB is None or _LIB.SSL_CTX_set_ciphersuites(pointer, _SUITES_TEXT) != 1:
        return False
    tls13 = [cipher["name"] for cipher in context.get_ciphers() if cipher.get("protocol") == "TLSv1.3"]
    return tuple(tls13) == GO_TLS13_SUITES
