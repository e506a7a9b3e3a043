"""NKeys: the Ed25519 public keys users (and, later, accounts and operators) are configured with,
and the check of the nonce a user signs (nats-server's `processClientOrLeafAuthentication`, nkey
branch). Here, below server/, because the config loader validates keys too.

Pure: no sockets. The server puts a fresh random nonce in each INFO when NKey users exist; the
client signs it with its seed and sends `nkey` and `sig` in CONNECT. Keys are decoded and
checksummed as the `nkeys` package encodes them; the signature is verified with PyNaCl (which
`nkeys` is built on).
"""

from __future__ import annotations

import base64
import binascii
import functools
import os

import nacl.exceptions
import nacl.signing
import nkeys

NONCE_BYTES = 11  # nats-server nonceLen
PUBLIC_KEYS_CACHED_MAX = 4096  # decoded public keys kept (users, accounts, operators seen lately)
USER_PREFIX = nkeys.PREFIX_BYTE_USER
ACCOUNT_PREFIX = nkeys.PREFIX_BYTE_ACCOUNT


def new_nonce() -> str:
    """As nats-server: 11 random bytes, base64 URL-safe without padding."""
    return base64.urlsafe_b64encode(os.urandom(NONCE_BYTES)).rstrip(b"=").decode()


def decode_public_key(text: str, prefix: int = USER_PREFIX) -> bytes | None:
    """The 32 raw key bytes of a public nkey with this prefix; None when it is not one."""
    if not isinstance(text, str) or not text.isascii():
        return None
    return _decode_public_key(text, prefix)


@functools.lru_cache(maxsize=PUBLIC_KEYS_CACHED_MAX)
def _decode_public_key(text: str, prefix: int) -> bytes | None:
    """(Cached: every user JWT names its key and its issuer's, and pure-Python base32 is slow.)"""
    padded = text + "=" * (-len(text) % 8)
    try:
        raw = base64.b32decode(padded)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != prefix:
        return None
    body, checksum = raw[:-2], raw[-2:]
    if bytes(nkeys.crc16_checksum(body)) != bytes(checksum):
        return None
    return bytes(body[1:])


def is_valid_user_key(text: str) -> bool:
    return decode_public_key(text, USER_PREFIX) is not None


def _decode_signature(sig: str) -> bytes | None:
    for decode in (lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)),
                   lambda s: base64.b64decode(s + "=" * (-len(s) % 4))):
        try:
            return decode(sig)
        except (binascii.Error, ValueError):
            continue
    return None


def signature_valid(public_key: str, nonce: str, sig: object) -> bool:
    """Whether `sig` (base64, URL-safe or standard) is the user's signature of `nonce`."""
    raw_key = decode_public_key(public_key)
    if raw_key is None or not isinstance(sig, str) or not sig:
        return False
    signature = _decode_signature(sig)
    if signature is None or len(signature) != 64:
        return False
    try:
        nacl.signing.VerifyKey(raw_key).verify(nonce.encode(), signature)
    except (nacl.exceptions.BadSignatureError, ValueError):
        return False
    return True
