"""JSON, times and headers as nats-server puts them on the wire.

Go's encoding/json escapes `<`, `>` and `&` inside strings (`"orders.\u003e"`) and writes no
spaces; times are RFC 3339 with up to nine fractional digits (trailing zeros dropped), UTC, and
the zero time is "0001-01-01T00:00:00Z".
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

ZERO_TIME = "0001-01-01T00:00:00Z"
NANOS_PER_SECOND = 1_000_000_000

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def go_json(value: object) -> bytes:
    text = _ENCODER.encode(value)
    if "<" in text or ">" in text or "&" in text:
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode()


def rfc3339(ns: int) -> str:
    """A Unix-nanosecond time as Go's time.Time marshals it (UTC, RFC3339Nano)."""
    if ns <= 0:
        return ZERO_TIME
    seconds, nanos = divmod(ns, NANOS_PER_SECOND)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if nanos:
        return f"{base}.{nanos:09d}".rstrip("0") + "Z"
    return base + "Z"


def parse_rfc3339(text: str) -> int:
    """Unix nanoseconds of an RFC 3339 time (any offset, up to nine fractional digits)."""
    if text.startswith("0001-01-01T00:00:00"):
        return 0
    main, fraction, zone = text, "", "+00:00"
    if main.endswith("Z"):
        main = main[:-1]
    else:
        for index in range(len(main) - 1, 9, -1):
            if main[index] in "+-":
                main, zone = main[:index], main[index:]
                break
    if "." in main:
        main, fraction = main.split(".", 1)
    stamp = datetime.fromisoformat(main + zone).astimezone(UTC)
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    return int(stamp.timestamp()) * NANOS_PER_SECOND + nanos


# --- headers ------------------------------------------------------------------------------------

HEADER_LINE = b"NATS/1.0"


def parse_headers(block: bytes) -> dict[str, str]:
    """The headers of a `NATS/1.0...` block (the last value wins for repeated keys)."""
    result: dict[str, str] = {}
    if not block:
        return result
    lines = block.split(b"\r\n")
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if sep:
            result[key.decode(errors="replace").strip()] = value.decode(errors="replace").strip()
    return result


def header_value(block: bytes, key: bytes) -> bytes | None:
    """One header's value, found without parsing the whole block (the publish hot path)."""
    position = block.find(b"\r\n" + key + b":")
    if position < 0:
        return None
    start = position + 3 + len(key)
    end = block.find(b"\r\n", start)
    return block[start:end].strip()


def build_headers(pairs: list[tuple[str, str]], *, status: str = "") -> bytes:
    first = HEADER_LINE + (b" " + status.encode() if status else b"")
    body = b"".join(f"{key}: {value}\r\n".encode() for key, value in pairs)
    return first + b"\r\n" + body + b"\r\n"


def strip_status(block: bytes) -> bytes:
    """A published header block as a stream stores it (nats-server removeHeaderStatusIfPresent):
    whatever follows `NATS/1.0` on the first line goes; a block left with no header is none."""
    end = block.find(b"\r")
    if end <= len(HEADER_LINE) or not block.startswith(HEADER_LINE):
        return block
    block = HEADER_LINE + block[end:]
    return b"" if block == HEADER_LINE + b"\r\n\r\n" else block


def append_headers(block: bytes, pairs: list[tuple[str, str]]) -> bytes:
    """Add headers to an existing block (or start one). As nats-server, the block's last two
    bytes (its closing CRLF) are replaced whatever they are: odd bytes never raise."""
    if len(block) <= 2:
        return build_headers(pairs)
    extra = b"".join(f"{key}: {value}\r\n".encode() for key, value in pairs)
    return block[:-2] + extra + b"\r\n"


def status_headers(code: int, description: str, pairs: list[tuple[str, str]] | None = None) -> bytes:
    return build_headers(pairs or [], status=f"{code} {description}")


def parse_go_duration(text: str) -> int:
    """A Go duration string ("5s", "1m30s", "250ms") in nanoseconds; ValueError if malformed."""
    units = {
        "ns": 1,
        "us": 1_000,
        "µs": 1_000,
        "ms": 1_000_000,
        "s": NANOS_PER_SECOND,
        "m": 60 * NANOS_PER_SECOND,
        "h": 3600 * NANOS_PER_SECOND,
    }
    text = text.strip()
    if not text:
        raise ValueError("empty duration")
    total = 0.0
    index = 0
    while index < len(text):
        start = index
        while index < len(text) and (text[index].isdigit() or text[index] == "."):
            index += 1
        number = text[start:index]
        unit_start = index
        while index < len(text) and not (text[index].isdigit() or text[index] == "."):
            index += 1
        unit = text[unit_start:index]
        if not number or unit not in units:
            raise ValueError(f"bad duration {text!r}")
        total += float(number) * units[unit]
    return int(total)
