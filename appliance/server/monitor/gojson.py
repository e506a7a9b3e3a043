"""JSON encoded exactly as Go's encoding/json writes it, so our bodies diff cleanly against nats-server.

Differences from Python's json module that a byte-level comparison would notice:
- `<`, `>`, `&`, U+2028 and U+2029 are escaped as \\u003c, \\u003e, \\u0026, \\u2028, \\u2029 (Go's HTML
  escaping); other non-ASCII text is written as raw UTF-8;
- floats use Go's shortest form: `2` not `2.0`, `1e-7` not `1e-07`, no exponent between 1e-6 and 1e21;
- `indented` matches `json.MarshalIndent(v, "", "  ")`, compact matches `json.Marshal(v)`.
Keys keep insertion order: callers build dicts in nats-server's struct field order.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from json.encoder import encode_basestring  # the C speedup of the json module

JsonValue = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None

_HTML_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})
_HTML_CHARACTERS = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain_string(text: str) -> str:
    """A JSON string with Go's escapes except the HTML ones (applied once to the whole document)."""
    if not text.isascii() and _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)  # a lone surrogate is invalid UTF-8: Go writes U+FFFD
    return encode_basestring(text)


def _html_escaped(document: str) -> str:
    """Go's HTML escapes; `<`, `>`, `&`, U+2028 and U+2029 can only occur inside JSON strings."""
    return document.translate(_HTML_ESCAPES) if _HTML_CHARACTERS.search(document) else document


def go_string(text: str) -> str:
    """A JSON string as Go writes it (the C encoder of the json module does the common escapes)."""
    return _html_escaped(_plain_string(text))


def go_float(value: float) -> str:
    assert math.isfinite(value), "Go's encoder refuses NaN and infinities"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)
    if abs(value) < 1e-6 or abs(value) >= 1e21:
        mantissa, _, exponent = shortest.partition("e")
        if not exponent:
            mantissa, _, exponent = f"{value:e}".partition("e")
        mantissa = mantissa.removesuffix(".0")
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"
    text = format(Decimal(shortest), "f")
    return text.removesuffix(".0") if "." in text and text.rstrip("0").endswith(".") else text


def _scalar(value: JsonValue) -> str | None:
    """The text of a scalar (HTML escapes still to do), or None for a container."""
    kind = type(value)
    if kind is str:
        return _plain_string(value)  # type: ignore[arg-type]
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return go_float(value)  # type: ignore[arg-type]
    return None


def _encode(value: JsonValue, out: list[str], newline: str | None, step: str = "  ") -> None:
    """Append the JSON of `value`; `newline` is "\\n" plus the current indentation, None when compact."""
    text = _scalar(value)
    if text is not None:
        out.append(text)
        return
    assert isinstance(value, (dict, list)), f"not JSON: {type(value).__name__}"
    if not value:
        out.append("{}" if isinstance(value, dict) else "[]")
        return
    inner = None if newline is None else newline + step
    separator = "," if inner is None else "," + inner
    colon = ":" if inner is None else ": "
    append = out.append
    append("{" if isinstance(value, dict) else "[")
    if inner is not None:
        append(inner)
    first = True
    for key, item in value.items() if isinstance(value, dict) else ((None, item) for item in value):
        if first:
            first = False
        else:
            append(separator)
        if key is not None:
            append(encode_basestring(key) if key.isascii() else _plain_string(key))
            append(colon)
        if isinstance(item, str):  # the common leaves inline: this loop is the whole cost of a large page
            append(encode_basestring(item) if item.isascii() else _plain_string(item))
        elif type(item) is int:
            append(str(item))
        else:
            _encode(item, out, inner, step)
    if newline is not None:
        append(newline)
    append("}" if isinstance(value, dict) else "]")


def dumps(value: JsonValue, *, indented: bool = True, indent: str = "  ") -> bytes:
    """`indent`: one level's indentation (nats-server indents /raftz with three spaces)."""
    out: list[str] = []
    _encode(value, out, "\n" if indented else None, indent)
    return _html_escaped("".join(out)).encode()
