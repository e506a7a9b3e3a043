"""Typed reads of config values, with nats-server's conversions, and the problem collector.

Every reader takes a `Value` (with its position) and returns a Python value or raises
`BadValue`; the section loaders catch it per key, record the problem and move on, so one file
reports all its problems at once (nats-server does the same with a recover per key).

Conversions follow nats-server (`server/opts.go`):
* durations: a string is a Go duration (`"1h30m"`, `30s`); an integer is *seconds*, accepted with
  a warning (so unquoted `2m` — the integer 2,000,000 — means 2,000,000 seconds);
* storage sizes: an integer (lexer suffixes applied), or a string ending in K/M/G/T (binary);
* listen: an integer port, or `host:port` split like Go's net.SplitHostPort.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from appliance import limits
from appliance.config.parser import ConfigMap, Entry, Position, Value


class BadValue(Exception):
    """A value of the wrong type or form; `position` is where the problem is reported."""

    def __init__(self, position: Position, message: str) -> None:
        super().__init__(message)
        self.position = position
        self.message = message


@dataclass(slots=True)
class Problems:
    """Errors and warnings of one load, each as 'file:line:col: text'."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped: int = 0  # problems beyond CONFIG_PROBLEMS_MAX, counted but not kept

    def error(self, position: Position | None, text: str) -> None:
        self._add(self.errors, f"{position}: {text}" if position is not None else text)

    def warn(self, position: Position, name: str, text: str) -> None:
        self._add(self.warnings, f'{position}: invalid use of field "{name}": {text}')

    def note(self, position: Position, text: str) -> None:
        """A warning in nats-server's plain form (no "invalid use of field")."""
        self._add(self.warnings, f"{position}: {text}")

    def _add(self, into: list[str], problem: str) -> None:
        if len(into) < limits.CONFIG_PROBLEMS_MAX:
            into.append(problem)
        else:
            self.dropped += 1

    def bad(self, error: BadValue) -> None:
        self.error(error.position, error.message)

    def unknown(self, entry: Entry) -> None:
        """An unknown key; keys defined only to be used as $variables are fine (nats-server)."""
        if not entry.value.used_as_variable:
            self.error(entry.key_position, f'unknown field "{entry.key}"')

    def unsupported(self, entry: Entry) -> None:
        self.error(entry.key_position, f'field "{entry.key}" is known to nats-server but not supported by appliance')


def type_name(data: object) -> str:
    """The name nats-server users see for a value's type (Go's %T of the parsed value)."""
    if isinstance(data, bool):
        return "bool"
    if isinstance(data, int):
        return "int64"
    if isinstance(data, float):
        return "float64"
    if isinstance(data, str):
        return "string"
    if isinstance(data, datetime):
        return "time.Time"
    if isinstance(data, ConfigMap):
        return "map"
    return "array"


def _wrong(name: str, value: Value, expected: str) -> BadValue:
    data = value.data
    shown = f' "{data}"' if isinstance(data, str) else (f" {data}" if isinstance(data, int | float) else "")
    return BadValue(value.position, f'field "{name}": expected {expected}, got {type_name(data)}{shown}')


def as_str(name: str, value: Value) -> str:
    if not isinstance(value.data, str):
        raise _wrong(name, value, "a string")
    return value.data


def as_int(name: str, value: Value) -> int:
    if isinstance(value.data, bool) or not isinstance(value.data, int):
        raise _wrong(name, value, "an integer")
    return value.data


def as_bool(name: str, value: Value) -> bool:
    if not isinstance(value.data, bool):
        raise _wrong(name, value, "a boolean")
    return value.data


def as_map(name: str, value: Value) -> ConfigMap:
    if not isinstance(value.data, ConfigMap):
        raise _wrong(name, value, "a map")
    return value.data


def as_list(name: str, value: Value) -> list[Value]:
    if not isinstance(value.data, list):
        raise _wrong(name, value, "an array")
    return value.data


def as_str_list(name: str, value: Value) -> list[str]:
    """A string or an array of strings (nats-server accepts both for tags, pinned accounts...)."""
    if isinstance(value.data, str):
        return [value.data]
    return [as_str(name, item) for item in as_list(name, value)]


def as_port(name: str, value: Value, *, allow_zero: bool = True) -> int:
    port = as_int(name, value)
    check_port(name, value.position, port, allow_zero=allow_zero)
    return port


def check_port(name: str, position: Position, port: int, *, allow_zero: bool = True) -> None:
    lowest = -1 if not allow_zero or port != 0 else 0
    if port < lowest or port > 65535:
        raise BadValue(position, f'field "{name}": port {port} out of range (-1 for random, 1..65535)')


# --- Go durations -----------------------------------------------------------------------------
_DURATION_UNITS_S = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration string ("1h30m", "500ms", "-2s"); ValueError with Go's message."""
    quoted = '"' + text + '"'
    rest = text
    sign = 1.0
    if rest[:1] in ("-", "+"):
        sign = -1.0 if rest[0] == "-" else 1.0
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if rest == "":
        raise ValueError(f"time: invalid duration {quoted}")
    total = 0.0
    while rest:
        match = _DURATION_PART.match(rest)
        assert match is not None  # every part of the pattern is optional
        whole, fraction, unit = match.group(1), match.group(2), match.group(3)
        if whole == "" and not fraction:
            raise ValueError(f"time: invalid duration {quoted}")
        if unit == "":
            raise ValueError(f"time: missing unit in duration {quoted}")
        if unit not in _DURATION_UNITS_S:
            raise ValueError(f'time: unknown unit "{unit}" in duration {quoted}')
        number = float(f"{whole or '0'}.{fraction or '0'}")
        total += number * _DURATION_UNITS_S[unit]
        rest = rest[match.end():]
    return sign * total


def as_duration(name: str, value: Value, problems: Problems) -> float:
    """Seconds. A string is a Go duration; an integer means seconds and earns a warning."""
    data = value.data
    if isinstance(data, str):
        try:
            return parse_go_duration(data)
        except ValueError as error:
            raise BadValue(value.position, f"error parsing {name}: {error}") from None
    if isinstance(data, int) and not isinstance(data, bool):
        problems.warn(value.position, name, f"{name} should be converted to a duration")
        return float(data)
    raise _wrong(name, value, 'a duration string like "2m"')


def as_duration_string(name: str, value: Value) -> float:
    """Seconds of a duration that nats-server only accepts as a string (lame_duck_duration)."""
    data = value.data
    if not isinstance(data, str):
        raise _wrong(name, value, 'a duration string like "2m"')
    try:
        return parse_go_duration(data)
    except ValueError as error:
        raise BadValue(value.position, f"error parsing {name}: {error}") from None


# --- sizes ------------------------------------------------------------------------------------
_STRING_SIZE_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}


def as_size(name: str, value: Value) -> int:
    """Bytes: an integer, or a string like "1G" (binary multiples, upper-case K/M/G/T only)."""
    data = value.data
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    if not isinstance(data, str):
        raise _wrong(name, value, "a size (integer or string like \"1G\")")
    if data == "":
        return 0
    number, suffix = data[:-1], data[-1]
    if not re.fullmatch(r"[+-]?\d+", number):
        raise BadValue(value.position, f'{name} strconv.ParseInt: parsing "{number}": invalid syntax')
    if suffix not in _STRING_SIZE_SHIFT:
        raise BadValue(value.position, f"{name} sizes defined as strings must end in K, M, G, T")
    return int(number) << _STRING_SIZE_SHIFT[suffix]


# --- host:port --------------------------------------------------------------------------------
def split_host_port(text: str) -> tuple[str, str]:
    """Go's net.SplitHostPort: ValueError when there is no port or too many colons."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("missing ']' in address")
        if text[end + 1:end + 2] != ":":
            raise ValueError("missing port in address")
        return text[1:end], text[end + 2:]
    colon = text.rfind(":")
    if colon < 0:
        raise ValueError("missing port in address")
    host = text[:colon]
    if ":" in host:
        raise ValueError("too many colons in address")
    return host, text[colon + 1:]


def as_listen(name: str, value: Value) -> tuple[str | None, int]:
    """(host or None when only a port was given, port) of `listen`, `http`, `cluster.listen`."""
    data = value.data
    if isinstance(data, int) and not isinstance(data, bool):
        check_port(name, value.position, data)
        return None, data
    if not isinstance(data, str):
        raise BadValue(value.position, f"expected port or host:port, got {type_name(data)}")
    try:
        host, port_text = split_host_port(data)
    except ValueError:
        raise BadValue(value.position, f'could not parse address string "{data}"') from None
    if not re.fullmatch(r"[+-]?\d+", port_text):
        raise BadValue(value.position, f'could not parse port "{port_text}"')
    port = int(port_text)
    check_port(name, value.position, port)
    return host, port
