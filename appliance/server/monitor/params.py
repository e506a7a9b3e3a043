"""Query parameters decoded as nats-server decodes them, with its exact 400 texts.

nats-server reads the first value of each parameter (`r.URL.Query().Get`), treats an empty value as
absent, and answers `400 text/plain` with Go's strconv error text on a malformed value, e.g.
`Error decoding boolean for 'subs': strconv.ParseBool: parsing "x": invalid syntax`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from appliance.errors import ApplianceError

from .view import ConnState

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_UNSIGNED = re.compile(r"[0-9]+")
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


class BadRequest(ApplianceError):
    """A monitoring request the server answers with 400 and this text."""


def go_quote(text: str) -> str:
    """Go `strconv.Quote`: double quotes, Go escapes for control and non-printable characters."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(char)])
        elif char.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _decode_error(kind: str, parser: str, name: str, text: str, why: str) -> BadRequest:
    return BadRequest(
        f"Error decoding {kind} for '{name}': strconv.{parser}: parsing {go_quote(text)}: {why}"
    )


class Query:
    """The decoded query string of one request: first value wins, as Go's `Values.Get`."""

    def __init__(self, raw: str) -> None:
        self._values: dict[str, str] = {}
        for name, value in parse_qsl(raw, keep_blank_values=True):
            self._values.setdefault(name, value)

    def get(self, name: str) -> str:
        return self._values.get(name, "")

    def boolean(self, name: str) -> bool:
        text = self.get(name)
        if text == "" or text in _GO_FALSE:
            return False
        if text in _GO_TRUE:
            return True
        raise _decode_error("boolean", "ParseBool", name, text, "invalid syntax")

    def integer(self, name: str) -> int:
        text = self.get(name)
        if text == "":
            return 0
        if not _DECIMAL.fullmatch(text):
            raise _decode_error("int", "Atoi", name, text, "invalid syntax")
        value = int(text)
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise _decode_error("int", "Atoi", name, text, "value out of range")
        return value

    def unsigned(self, name: str) -> int:
        text = self.get(name)
        if text == "":
            return 0
        if not _UNSIGNED.fullmatch(text):
            raise _decode_error("uint64", "ParseUint", name, text, "invalid syntax")
        value = int(text)
        if value > UINT64_MAX:
            raise _decode_error("uint64", "ParseUint", name, text, "value out of range")
        return value

    def subs(self) -> tuple[bool, bool]:
        """`subs=detail` → (False, True); otherwise (ParseBool(subs), False)."""
        if self.get("subs").lower() == "detail":
            return False, True
        return self.boolean("subs"), False

    def state(self) -> ConnState:
        text = self.get("state")
        lowered = text.lower()
        if text == "" or lowered == "open":
            return "open"
        if lowered == "closed":
            return "closed"
        if lowered in ("any", "all"):
            return "any"
        raise BadRequest(f"Error decoding state for {text}")
