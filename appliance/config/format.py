"""Plain Python data -> NATS config text that `parser.py` reads back to the same data.

Used to write configs (tests, generated cluster files) and as the inverse in round-trip tests.
Strings are always double-quoted with the escapes the lexer knows; every value is followed by a
newline, because a bare number does not end at `]` or `}` in the NATS grammar (`[1]` is an
error in nats-server too). Keys must be bare words: letters, digits, `_`, `-`, `$`, `.`.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

_BARE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.\-]*")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}
INDENT = "  "


def quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    if not _BARE_KEY.fullmatch(key) or key.lower() == "include":
        raise ValueError(f"key {key!r} cannot be written as a bare NATS config key")
    return key


def _value(value: object, depth: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if not re.fullmatch(r"-?\d+\.\d+", text):
            raise ValueError(f"float {value!r} has no plain decimal form")
        return text
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    pad = INDENT * (depth + 1)
    if isinstance(value, list):
        items = "".join(f"{pad}{_value(item, depth + 1)}\n" for item in value)
        return f"[\n{items}{INDENT * depth}]"
    if isinstance(value, dict):
        return "{\n" + _entries(value, depth + 1) + INDENT * depth + "}"
    raise TypeError(f"cannot write {type(value).__name__} as a NATS config value")


def _entries(mapping: dict[str, object], depth: int) -> str:
    pad = INDENT * depth
    return "".join(f"{pad}{_key(key)}: {_value(value, depth)}\n" for key, value in mapping.items())


def dumps(mapping: dict[str, object]) -> str:
    """Config text for a top-level mapping of str keys to bool/int/float/str/datetime/list/dict."""
    return _entries(mapping, 0)
