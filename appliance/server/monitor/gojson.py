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
from decimal import Decimal

JsonValue = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HEX_ESCAPED = frozenset("<>&\u2028\u2029")


def go_string(text: str) -> str:
    out = ['"']
    for char in text:
        short = _SHORT_ESCAPES.get(char)
        if short is not None:
            out.append(short)
        elif char < " " or char in _HEX_ESCAPED:
            out.append(f"\\u{ord(char):04x}")
        elif 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\\ufffd")  # a lone surrogate is invalid UTF-8: Go writes the replacement char
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


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


def _encode(value: JsonValue, out: list[str], indent: str | None, depth: int) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, str):
        out.append(go_string(value))
    elif isinstance(value, list):
        _encode_items(value, out, indent, depth, "[]")
    else:
        _encode_items(value, out, indent, depth, "{}")


def _encode_items(
    container: list[JsonValue] | dict[str, JsonValue],
    out: list[str],
    indent: str | None,
    depth: int,
    brackets: str,
) -> None:
    if not container:
        out.append(brackets)
        return
    inner = "" if indent is None else "\n" + indent * (depth + 1)
    closing = "" if indent is None else "\n" + indent * depth
    separator = ":" if indent is None else ": "
    out.append(brackets[0])
    items: list[tuple[str | None, JsonValue]]
    if isinstance(container, dict):
        items = list(container.items())
    else:
        items = [(None, item) for item in container]
    for position, (key, item) in enumerate(items):
        if position:
            out.append(",")
        out.append(inner)
        if key is not None:
            out.append(go_string(key) + separator)
        _encode(item, out, indent, depth + 1)
    out.append(closing + brackets[1])


def dumps(value: JsonValue, *, indented: bool = True) -> bytes:
    out: list[str] = []
    _encode(value, out, "  " if indented else None, 0)
    return "".join(out).encode()
