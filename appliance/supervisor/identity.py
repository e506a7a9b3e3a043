"""The server's identity: one server_id per host, shaped like nats-server's.

nats-server's id is the public nkey of a server key pair: base32 (RFC 4648, no padding) of
prefix byte 'N' (13 << 3) + 32 key bytes + CRC-16 (XMODEM, little endian) = 56 characters that
start with "N". We draw the 32 bytes at random (no signing is done with it), so clients and tools
that validate the id's shape or checksum accept ours.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

SERVER_PREFIX_BYTE = 13 << 3  # nkeys PrefixByteServer: encodes to a leading "N"
KEY_BYTES = 32
SERVER_ID_CHARS = 56


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def generate_server_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    raw = bytes([SERVER_PREFIX_BYTE]) + random_bytes(KEY_BYTES)
    raw += crc16_xmodem(raw).to_bytes(2, "little")
    server_id = base64.b32encode(raw).decode("ascii").rstrip("=")
    assert len(server_id) == SERVER_ID_CHARS
    assert server_id[0] == "N"
    return server_id


def is_server_id(text: str) -> bool:
    """True when `text` is a well-formed server public nkey (shape and checksum)."""
    if len(text) != SERVER_ID_CHARS or not text.startswith("N"):
        return False
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except ValueError:
        return False
    body, checksum = raw[:-2], raw[-2:]
    return body[0] == SERVER_PREFIX_BYTE and crc16_xmodem(body).to_bytes(2, "little") == checksum
