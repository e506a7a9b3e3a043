"""Request decoding as nats-server's (JetStream `strict: true`) json.Decoder does it.

nats-server reads an API request with a json.Decoder that disallows unknown fields and decodes
every JSON value of the body, one after another, into the same Go struct. This module does the
same in two pure steps, bytes in and checked values out:

- jsonscan.py scans the body value by value (no recursion: nesting is bounded at Go's 10,000
  levels, "exceeded max depth"), with Go's syntax error texts and offsets, into `Node`s that keep
  each value's raw bytes;
- `decode_into` checks a node against a Go type (`GoStruct`, `GoInt`, ...) with Go's rules: the
  first type error or unknown field in document order wins, keys match case-insensitively, `null`
  leaves a scalar alone and clears a pointer, slice or map, enums parse their raw bytes.

Errors are JsApiError 10025 "invalid JSON: ..." with the text nats-server 2.15.1 answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from appliance.jetstream import errors
from appliance.jetstream.jsonscan import (
    INTEGER,
    WHITESPACE,
    GoJsonError,
    JsonSyntaxError,
    Node,
    as_node,
    fast_document,
    go_quote,
    invalid_json,
    iter_values,
    json_kind,
    parse_json,
    quote_char,
    scan_value,
    to_python,
)
from appliance.jetstream.wire import parse_rfc3339

JsonObject = dict[str, object]
# re-exported for the handlers
__all__ = ["GoJsonError", "invalid_json", "iter_values", "json_kind", "parse_json", "to_python"]


class _NeedExact(Exception):
    """A fast-path node whose raw bytes matter and can not be rebuilt exactly: decode again with
    the exact scanner."""


def _raw_known(node: Node, ctx: _Context) -> bool:
    """Can the raw bytes of this node be known? Always after the exact scanner (its runs of plain
    scalars hold no escapes and no "-0"); after the fast path only when rebuilt without a doubt."""
    data = ctx.data
    if ctx.exact or node.start >= 0 or node.kind in ("null", "bool"):
        return True
    if node.kind == "num":
        return node.value != "0" or b"-0" not in data
    return node.kind == "str" and b"\\" not in data  # no escapes anywhere: the text is the bytes


_KIND_WORD = {
    "obj": "object", "arr": "array", "str": "string", "num": "number", "bool": "bool", "null": "null"
}


def kind_word(node: Node) -> str:
    """The JSON kind of a node as Go's errors name it."""
    return _KIND_WORD[node.kind]


class GoType:
    name = ""

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        raise NotImplementedError


class _Unchanged:
    """decode's answer for a null that leaves the Go value as it was."""


UNCHANGED = _Unchanged()


@dataclass(slots=True)
class _Context:
    data: bytes
    root: str
    exact: bool = True  # nodes of the exact scanner (False: of the fast path)

    def type_error(
        self, node: Node, go_type: GoType, path: list[str], *, literal: bool = False
    ) -> errors.JsApiError:
        value = _KIND_WORD[node.kind]
        if literal:
            value += f" {node.value}"
        if not path:
            return invalid_json(f"json: cannot unmarshal {value} into Go value of type {go_type.name}")
        where = ".".join([self.root, *path])
        into = where if path[-1].isdigit() else f"Go struct field {where}"
        return invalid_json(f"json: cannot unmarshal {value} into {into} of type {go_type.name}")


@dataclass(frozen=True, slots=True)
class GoString(GoType):
    name: str = "string"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return UNCHANGED
        if node.kind != "str":
            raise ctx.type_error(node, self, path)
        return node.value


@dataclass(frozen=True, slots=True)
class GoBool(GoType):
    name: str = "bool"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return UNCHANGED
        if node.kind != "bool":
            raise ctx.type_error(node, self, path)
        return node.value


@dataclass(frozen=True, slots=True)
class GoInt(GoType):
    name: str = "int64"
    bits: int = 64
    signed: bool = True

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return UNCHANGED
        if node.kind != "num":
            raise ctx.type_error(node, self, path)
        literal = str(node.value)
        if not _raw_known(node, ctx):
            raise _NeedExact  # "-0" read as 0
        if not INTEGER.fullmatch(literal) or (not self.signed and literal.startswith("-")):
            raise ctx.type_error(node, self, path, literal=True)
        value = int(literal)
        if self.signed:
            low, high = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        else:
            low, high = 0, (1 << self.bits) - 1
        if not low <= value <= high:
            raise ctx.type_error(node, self, path, literal=True)
        return value


@dataclass(frozen=True, slots=True)
class GoSlice(GoType):
    elem: GoType = field(default_factory=GoString)
    name: str = "[]string"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return None
        if node.kind != "arr":
            raise ctx.type_error(node, self, path)
        before = current if isinstance(current, list) else []
        out: list[object] = []
        for index, child in enumerate(node.value):  # type: ignore[arg-type]
            value = self.elem.decode(as_node(child), ctx, [*path, str(index)], None)
            if value is UNCHANGED:  # Go reuses the slice: a null element keeps what was there
                value = before[index] if index < len(before) else _zero(self.elem)
            out.append(value)
        return out


def _zero(go_type: GoType) -> object:
    """Go's zero value of a scalar type (None for the rest: nil)."""
    if isinstance(go_type, GoString):
        return ""
    if isinstance(go_type, GoBool):
        return False
    if isinstance(go_type, GoInt):
        return 0
    return None


@dataclass(frozen=True, slots=True)
class GoMap(GoType):
    elem: GoType = field(default_factory=GoString)
    name: str = "map[string]string"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return None
        if node.kind != "obj":
            raise ctx.type_error(node, self, path)
        out: dict[str, object] = dict(current) if isinstance(current, dict) else {}  # Go keeps entries
        for key, child in node.value:  # type: ignore[attr-defined]
            value = self.elem.decode(as_node(child), ctx, [*path, key], out.get(key))
            out[key] = _zero(self.elem) if value is UNCHANGED else value  # a fresh zero element
        return out


@dataclass(frozen=True, slots=True)
class GoStruct(GoType):
    """A Go struct by its JSON field names; `pointer`: a null clears it (a *T field)."""

    name: str = ""
    fields: dict[str, GoType] = field(default_factory=dict)
    pointer: bool = False
    strict: bool = True  # unknown fields are errors (nats-server's API decoder); else skipped

    def field_for(self, key: str) -> tuple[str, GoType] | None:
        found = self.fields.get(key)
        if found is not None:
            return key, found
        folded = key.casefold()
        for name, go_type in self.fields.items():  # Go matches names case-insensitively
            if name.casefold() == folded:
                return name, go_type
        return None

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return None if self.pointer else UNCHANGED
        if node.kind != "obj":
            raise ctx.type_error(node, self, path)
        out: dict[str, object] = dict(current) if isinstance(current, dict) else {}
        for key, child in node.value:  # type: ignore[attr-defined]
            found = self.field_for(key)
            if found is None:
                if not self.strict:
                    continue
                raise invalid_json(f"json: unknown field {go_quote(key)}")
            name, go_type = found
            value = go_type.decode(as_node(child), ctx, [*path, key], out.get(name))
            if value is not UNCHANGED:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class GoEnum(GoType):
    """A type with its own UnmarshalJSON: `parse` takes the value's raw bytes, returns the value
    or raises ValueError with the text nats-server answers."""

    name: str = ""
    parse: Callable[[bytes, Node], object] = lambda raw, node: raw

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if not _raw_known(node, ctx):
            raise _NeedExact
        try:
            return self.parse(node.raw(ctx.data), node)
        except ValueError as exc:
            raise invalid_json(str(exc)) from None


class RawObject(dict):  # type: ignore[type-arg]
    """A JSON object decoded later against its own struct: the plain values, plus where it was
    (body, node, path) so its errors name the field as nats-server's do."""

    def __init__(self, ctx: _Context, node: Node, path: list[str]) -> None:
        super().__init__(to_python(node))  # type: ignore[arg-type]
        self.ctx, self.node, self.path = ctx, node, path


@dataclass(frozen=True, slots=True)
class GoObject(GoType):
    """A nested object a later step decodes (`RawObject`)."""

    name: str = "struct"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if not ctx.exact:
            raise _NeedExact  # decoded later: keep exact nodes
        if node.kind == "null":
            return None
        if node.kind != "obj":
            raise ctx.type_error(node, self, path)
        return RawObject(ctx, node, path)


@dataclass(frozen=True, slots=True)
class GoAny(GoType):
    name: str = "interface {}"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        return to_python(node)


def enum_of(
    *names: str, fold: bool = False, empty: str | None = None, aliases: dict[str, str] | None = None
) -> Callable[[bytes, Node], object]:
    """nats-server's policy enums: the raw JSON must be one of the quoted names (or an alias)."""
    quoted = {json.dumps(name).encode(): name for name in names}
    quoted.update({json.dumps(alias).encode(): name for alias, name in (aliases or {}).items()})

    def parse(raw: bytes, node: Node) -> object:
        key = raw.lower() if fold else raw
        if key in quoted:
            return quoted[key]
        if empty is not None and raw == b'""':
            return empty
        raise ValueError(f"can not unmarshal {go_quote(raw)}")

    return parse


@dataclass(frozen=True, slots=True)
class GoTime(GoType):
    """time.Time (a *time.Time field): null leaves it, a string must be RFC 3339."""

    name: str = "time.Time"

    def decode(self, node: Node, ctx: _Context, path: list[str], current: object) -> object:
        if node.kind == "null":
            return UNCHANGED
        if node.kind != "str":
            raise ctx.type_error(node, self, path)
        text = str(node.value)
        try:
            parse_rfc3339(text)
        except ValueError:
            reason = _time_reason(text)
            layout = '"2006-01-02T15:04:05Z07:00"'
            raise invalid_json(f"parsing time {_time_quote(text)} as {layout}: {reason}") from None
        return text


def _time_quote(text: str) -> str:
    """Go's time package quote: bytes of non-ASCII and control characters as \\x escapes."""
    out = ['"']
    for char in text:
        if ord(char) >= 0x80 or char < " ":
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", errors="surrogatepass"))
        else:
            out.append("\\" + char if char in '"\\' else char)
    out.append('"')
    return "".join(out)


def _time_reason(text: str) -> str:
    """Go's first complaint about a string that is not RFC 3339 (the common cases)."""
    layout = (("2006", 4), ("-", 1), ("01", 2), ("-", 1), ("02", 2), ("T", 1), ("15", 2), (":", 1), ("04", 2),
              (":", 1), ("05", 2))
    rest = text
    for element, width in layout:
        head = rest[:width]
        ok = head == element if not element.isdigit() else (len(head) == width and head.isdigit())
        if not ok:
            return f'cannot parse {_time_quote(rest)} as "{element}"'
        rest = rest[width:]
    return f'cannot parse {_time_quote(rest)} as "Z07:00"'


INT64 = GoInt()
INT = GoInt("int")
INT32 = GoInt("int32", 32)
UINT64 = GoInt("uint64", 64, signed=False)
DURATION = GoInt("time.Duration")
STRING = GoString()
BOOL = GoBool()
STRINGS = GoSlice(STRING, "[]string")
STRING_MAP = GoMap(STRING, "map[string]string")
TIME = GoTime()


def decode_into(data: bytes, go_type: GoStruct, root: str) -> JsonObject:
    """The body decoded as nats-server's unmarshalRequest does: every JSON value of it in turn
    into the same struct (an empty body leaves it empty). Raises JsApiError 10025."""
    if not data.strip():
        return {}
    fast = fast_document(data)
    if fast.document is not None:
        try:
            return _decode_values([as_node(fast.document[0])], data, go_type, root, exact=False)
        except _NeedExact:
            pass
    values = iter_values(data, fast.failed_at, first_valid=fast.first_valid)
    return _decode_values(values, data, go_type, root, exact=True)


def _decode_values(
    nodes: Iterable[Node], data: bytes, go_type: GoStruct, root: str, *, exact: bool
) -> JsonObject:
    result: object = {}
    for node in nodes:
        ctx = _Context(data, root, exact)
        if node.kind != "obj" and node.kind != "null":
            raise ctx.type_error(node, go_type, [])
        value = go_type.decode(node, ctx, [], result)
        if isinstance(value, dict):
            result = value
    return result if isinstance(result, dict) else {}


def unmarshal(data: bytes, go_type: GoStruct, root: str) -> JsonObject:
    """Go's json.Unmarshal of one document into a struct; raises GoJsonError with Go's text."""
    fast = fast_document(data)
    if fast.document is not None:
        try:
            return _unmarshal_node(as_node(fast.document[0]), data, go_type, root, exact=False)
        except _NeedExact:
            pass
    pos = WHITESPACE.match(data).end()  # type: ignore[union-attr]
    try:
        node, end = scan_value(data, pos, None, fast.failed_at)
        rest = WHITESPACE.match(data, end).end()  # type: ignore[union-attr]
        if rest < len(data):
            after = f"invalid character {quote_char(data[rest])} after top-level value"
            raise JsonSyntaxError(after, rest + 1)
    except JsonSyntaxError as exc:
        raise GoJsonError(exc.unmarshal_text()) from None
    return _unmarshal_node(node, data, go_type, root, exact=True)


def _unmarshal_node(node: Node, data: bytes, go_type: GoStruct, root: str, *, exact: bool) -> JsonObject:
    ctx = _Context(data, root, exact)
    try:
        if node.kind not in ("obj", "null"):
            raise ctx.type_error(node, go_type, [])
        value = go_type.decode(node, ctx, [], {})
    except errors.JsApiError as exc:
        raise GoJsonError(exc.description.removeprefix("invalid JSON: ")) from None
    return value if isinstance(value, dict) else {}


# --- the older field-kind tables of other handlers -------------------------------------------------

Kind = (
    Literal["str", "int", "uint", "bool", "strs", "ints", "object", "strmap", "time", "any"] | tuple[str, ...]
)
_KIND_TYPES: dict[str, GoType] = {
    "str": STRING,
    "int": INT64,
    "uint": UINT64,
    "bool": BOOL,
    "strs": STRINGS,
    "ints": GoSlice(DURATION, "[]time.Duration"),
    "object": GoObject(),
    "strmap": STRING_MAP,
    "time": TIME,
    "any": GoAny(),
}
_STRUCTS: dict[tuple[int, str], GoStruct] = {}


def _go_type(name: str, kind: Kind | GoType) -> GoType:
    if isinstance(kind, GoType):
        return kind
    if isinstance(kind, tuple):
        return GoEnum(f"server.{name}", enum_of(*kind))
    return _KIND_TYPES[kind]


def struct_of(fields: Mapping[str, Kind | GoType], struct: str) -> GoStruct:
    """A field table (Go types, or the older kinds) as a Go struct type (cached)."""
    key = (id(fields), struct)
    found = _STRUCTS.get(key)
    if found is None:
        go_fields = {name: _go_type(name, kind) for name, kind in fields.items()}
        found = _STRUCTS[key] = GoStruct(f"server.{struct}", go_fields)
    return found


def decode_object(data: bytes | object, fields: Mapping[str, Kind | GoType], struct: str) -> JsonObject:
    """Decode (if bytes) and check a JSON object against a field-kind table."""
    go_type = struct_of(fields, struct)
    if isinstance(data, RawObject):
        decoded = go_type.decode(data.node, data.ctx, data.path, {})
        result = decoded if isinstance(decoded, dict) else {}
    elif isinstance(data, (bytes, bytearray)):
        result = decode_into(bytes(data), go_type, struct)
    else:
        result = decode_into(json.dumps(data).encode(), go_type, struct)
    return {k: v for k, v in result.items() if v is not None}


def request_body(data: bytes) -> bytes:
    """nats-server parses an optional body only when it starts with `{` or `[`; anything else is empty."""
    stripped = data.strip()
    return stripped if stripped[:1] in (b"{", b"[") else b""
