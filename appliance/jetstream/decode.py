"""Request decoding as nats-server's (JetStream `strict: true`) json.Decoder does it.

nats-server reads an API request with a json.Decoder that disallows unknown fields and decodes
every JSON value of the body, one after another, into the same Go struct. This module does the
same in two pure steps, bytes in and checked values out:

- `iter_values` scans the body value by value (no recursion: nesting is bounded at Go's 10,000
  levels, "exceeded max depth"), with Go's syntax error texts and offsets, into `Node`s that keep
  each value's raw bytes;
- `decode_into` checks a node against a Go type (`GoStruct`, `GoInt`, ...) with Go's rules: the
  first type error or unknown field in document order wins, keys match case-insensitively, `null`
  leaves a scalar alone and clears a pointer, slice or map, enums parse their raw bytes.

Errors are JsApiError 10025 "invalid JSON: ..." with the text nats-server 2.15.1 answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from appliance.jetstream import errors
from appliance.jetstream.wire import parse_rfc3339

MAX_DEPTH = 10_000  # Go's encoding/json maxNestingDepth
RUN_MIN_BYTES = 256  # array elements read in one C pass from this many bytes of plain scalars
JsonObject = dict[str, object]


def invalid_json(text: str) -> errors.JsApiError:
    return errors.INVALID_JSON.format(err=text)


# --- scanning ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Node:
    """One JSON value: kind, value (pairs for an object, nodes for an array, the literal text of
    a number) and its byte span in the body."""

    kind: Literal["obj", "arr", "str", "num", "bool", "null"]
    value: object
    start: int
    end: int = 0

    def raw(self, data: bytes) -> bytes:
        if self.start >= 0:
            return data[self.start : self.end]
        if self.kind == "num":  # a node of the fast path: its text again (the same but for spacing)
            return str(self.value).encode()
        compact = json.dumps(to_python(self), ensure_ascii=False, separators=(",", ":"))
        return compact.encode()


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


class _Pairs(list):  # type: ignore[type-arg]
    """An object of the fast path: its (key, value) pairs in order, duplicates kept."""


class _Num(str):
    """A fractional or exponent number of the fast path: its literal text (integers stay int:
    their text is their digits, but for "-0")."""


def _reject_constant(name: str) -> object:
    raise ValueError(name)  # NaN and Infinity are not JSON: the exact scanner words the error


def _fast(data: bytes) -> object:
    """The body through the C json module when it is one plain valid document (None otherwise:
    the exact scanner then reads it, errors and all)."""
    try:
        text = data.decode("utf-8")  # not UTF-8: the exact scanner keeps the bytes for the errors
        return (json.loads(
            text, object_pairs_hook=_Pairs, parse_float=_Num, parse_constant=_reject_constant
        ),)
    except (ValueError, RecursionError):
        return None


def as_node(value: object) -> Node:
    """A child of a node: a Node of the exact scanner, or a value of the fast path wrapped."""
    if isinstance(value, Node):
        return value
    if isinstance(value, _Pairs):
        return Node("obj", value, -1)
    if isinstance(value, list):
        return Node("arr", value, -1)
    if isinstance(value, _Num):
        return Node("num", str(value), -1)
    if isinstance(value, int) and not isinstance(value, bool):  # an integer's text is its digits
        return Node("num", str(value), -1)
    if isinstance(value, str):
        return Node("str", _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value, -1)
    if isinstance(value, bool):
        return Node("bool", value, -1)
    return Node("null", None, -1)


class _Syntax(Exception):
    """A syntax error: Go's message and the offset json.Decoder adds (None: the input ended)."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.message, self.offset = message, offset

    def decoder_text(self) -> str:
        """As nats-server's unmarshalRequest words it (json.Decoder, offset appended)."""
        return _EOF if self.offset is None else f"{self.message} at offset {self.offset}"

    def unmarshal_text(self) -> str:
        """As json.Unmarshal words it."""
        return "unexpected end of JSON input" if self.offset is None else self.message


class GoJsonError(ValueError):
    """json.Unmarshal's error text, for decoders that word it themselves (pull requests)."""


_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 92: "\\\\"}


def quote_char(c: int) -> str:
    """A byte as Go's encoding/json names it in a syntax error."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    if c in _ESCAPES:
        return f"'{_ESCAPES[c]}'"
    if 0x20 <= c < 0x7F:
        return f"'{chr(c)}'"
    return f"'\\x{c:02x}'"


def _error(text: str, index: int) -> _Syntax:
    return _Syntax(text, index + 1)


_EOF = "unexpected EOF"


def _string(data: bytes, pos: int) -> tuple[str, int]:
    match = _STRING.match(data, pos)
    if match is None:
        raise _string_error(data, pos)
    end = match.end()
    token = data[pos:end]
    if b"\\" not in token:
        text = token[1:-1].decode("utf-8", errors="replace")
    else:
        text = json.loads(token.decode("utf-8", errors="replace"))
        if _SURROGATE.search(text):
            text = _SURROGATE.sub("\ufffd", text)  # Go replaces unpaired surrogates
    return text, end


def _quote_sequence(raw: bytes) -> str:
    """An escape sequence as Go's JSON errors show it: in backquotes, unless it holds a backquote,
    white space, a character that is not printable or not UTF-8 (then Go-quoted)."""
    text = raw.decode("utf-8", errors="replace")
    if any(c == "`" or c == "\ufffd" or c.isspace() or not c.isprintable() for c in text):
        return go_quote(raw)
    return f"`{text}`"


def _string_error(data: bytes, pos: int) -> _Syntax:
    i, n = pos + 1, len(data)
    while i < n:
        c = data[i]
        if c == 0x22:
            break
        if c < 0x20:
            return _error(f"invalid character {quote_char(c)} in string", i)
        if c == 0x5C:
            if i + 1 >= n:
                return _Syntax(_EOF)
            e = data[i + 1]
            if e == ord("u"):
                digits = data[i + 2 : i + 6]
                if len(digits) < 4:
                    return _Syntax(_EOF)
                if any(chr(d) not in "0123456789abcdefABCDEF" for d in digits):
                    sequence = _quote_sequence(data[i : i + 6])
                    return _error(f"invalid escape sequence {sequence} in string", i + 5)
                i += 6
                continue
            if chr(e) not in '"\\/bfnrt':
                return _error(f"invalid escape sequence {_quote_sequence(data[i : i + 2])} in string", i + 1)
            i += 2
            continue
        i += 1
    return _Syntax(_EOF)


def _number(data: bytes, pos: int) -> tuple[str, int]:
    """A number token as Go's scanner reads it: (literal, end); end -1 when the input ends inside
    it, -(index + 2) for a bad character at index."""
    match = _NUMBER.match(data, pos)
    end = match.end() if match is not None else pos
    n = len(data)
    if match is not None and end > pos and not (end < n and data[end] in b".eE"):
        return data[pos:end].decode(), end
    i = pos + 1 if data[pos] == 0x2D else pos  # after the sign: an integer part, then . and e parts
    if i >= n:
        return "", -1
    if data[i] == 0x30:
        i += 1
    elif 0x31 <= data[i] <= 0x39:
        while i < n and 0x30 <= data[i] <= 0x39:
            i += 1
    else:
        return "", -(i + 2)
    if i < n and data[i] == 0x2E:
        i += 1
        if i >= n:
            return "", -1
        if not 0x30 <= data[i] <= 0x39:
            return "", -(i + 2)
        while i < n and 0x30 <= data[i] <= 0x39:
            i += 1
    if i < n and data[i] in b"eE":
        i += 1
        if i < n and data[i] in b"+-":
            i += 1
        if i >= n:
            return "", -1
        if not 0x30 <= data[i] <= 0x39:
            return "", -(i + 2)
        while i < n and 0x30 <= data[i] <= 0x39:
            i += 1
    return data[pos:i].decode(), i


def _value_start(data: bytes, pos: int, stack: list[Node]) -> tuple[Node | None, int]:
    """Scan the value at pos: a scalar node (done) or an opened container (pushed, None)."""
    n = len(data)
    if pos >= n:
        raise _Syntax(_EOF)
    c = data[pos]
    if c == 0x7B or c == 0x5B:  # { [
        if len(stack) >= MAX_DEPTH:
            raise _error("exceeded max depth", pos)
        stack.append(Node("obj" if c == 0x7B else "arr", [], pos))
        return None, pos + 1
    if c == 0x22:
        text, end = _string(data, pos)
        return Node("str", text, pos, end), end
    if c == 0x2D or 0x30 <= c <= 0x39:
        literal, end = _number(data, pos)
        if end == -1:
            raise _Syntax(_EOF)
        if end < 0:
            index = -end - 2
            raise _error(f"invalid character {quote_char(data[index])} in numeric literal", index)
        return Node("num", literal, pos, end), end
    word = _LITERALS.get(c)
    if word is not None:
        for k, expected in enumerate(word):
            if pos + k >= n:
                raise _Syntax(_EOF)
            if data[pos + k] != expected:
                got = quote_char(data[pos + k])
                text = f"invalid character {got} in literal {word.decode()} (expecting '{chr(expected)}')"
                raise _error(text, pos + k)
        value = {b"true": True, b"false": False, b"null": None}[word]
        return Node("null" if value is None else "bool", value, pos, pos + len(word)), pos + len(word)
    raise _error(f"invalid character {quote_char(c)} looking for beginning of value", pos)


def _key(data: bytes, pos: int) -> tuple[str, int]:
    pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
    if pos >= len(data):
        raise _Syntax(_EOF)
    if data[pos] != 0x22:
        raise _error(
            f"invalid character {quote_char(data[pos])} looking for beginning of object key string", pos
        )
    key, pos = _string(data, pos)
    pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
    if pos >= len(data):
        raise _Syntax(_EOF)
    if data[pos] != 0x3A:
        raise _error(f"invalid character {quote_char(data[pos])} after object key", pos)
    return key, pos + 1


_SCALAR = rb'(?:"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"' \
    rb"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?(?![.eE0-9])|true|false|null)"
_SCALAR_RUN = re.compile(rb"[ \t\r\n]*" + _SCALAR + rb"(?:[ \t\r\n]*,[ \t\r\n]*" + _SCALAR + rb")*")


def _scalar_run(data: bytes, pos: int, top: Node) -> tuple[bool, int]:
    """Array elements that are plain scalars, read in one C pass (large flat arrays stay fast);
    (whether any were read, the position after them)."""
    run = _SCALAR_RUN.match(data, pos)
    if run is None or run.end() - pos < RUN_MIN_BYTES:  # a short run: cheaper token by token
        return False, pos
    chunk = b"[" + data[pos : run.end()] + b"]"
    if b"\\" in chunk or b"-0" in chunk:  # escapes and "-0": their bytes matter, read them exactly
        return False, pos
    top.value.extend(  # type: ignore[attr-defined]
        json.loads(chunk.decode("utf-8", errors="replace"), parse_float=_Num)
    )
    return True, run.end()


def _scan_value(data: bytes, pos: int) -> tuple[Node, int]:
    """One whole JSON value from pos (after white space), iteratively."""
    stack: list[Node] = []
    keys: list[str] = []
    n = len(data)
    while True:
        pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
        node, pos = _value_start(data, pos, stack)
        if node is None:  # an opened container: empty, or its first key / element
            top = stack[-1]
            pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                raise _Syntax(_EOF)
            closer = 0x7D if top.kind == "obj" else 0x5D
            if data[pos] == closer:
                stack.pop()
                top.end = pos + 1
                node, pos = top, pos + 1
            elif top.kind == "obj":
                key, pos = _key(data, pos)
                keys.append(key)
                continue
            else:
                read, pos = _scalar_run(data, pos, top)
                if not read:
                    continue
        while True:  # a complete value: attach it (None: already attached), then a delimiter
            if not stack:
                assert node is not None
                return node, pos
            top = stack[-1]
            if node is not None:
                if top.kind == "obj":
                    top.value.append((keys.pop(), node))  # type: ignore[attr-defined]
                else:
                    top.value.append(node)  # type: ignore[attr-defined]
            pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                raise _Syntax(_EOF)
            c = data[pos]
            if c == 0x2C:
                pos += 1
                if top.kind == "obj":
                    key, pos = _key(data, pos)
                    keys.append(key)
                    break
                read, pos = _scalar_run(data, pos, top)
                if not read:
                    break
                node = None
                continue
            if c == (0x7D if top.kind == "obj" else 0x5D):
                stack.pop()
                top.end = pos + 1
                node, pos = top, pos + 1
                continue
            where = "after object key:value pair" if top.kind == "obj" else "after array element"
            raise _error(f"invalid character {quote_char(c)} {where}", pos)


def iter_values(data: bytes) -> Iterator[Node]:
    """Each JSON value of the body in turn, as Go's json.Decoder reads them (raises JsApiError)."""
    pos, n = 0, len(data)
    while True:
        pos = _WS.match(data, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            return
        try:
            node, pos = _scan_value(data, pos)
        except _Syntax as exc:
            raise invalid_json(exc.decoder_text()) from None
        yield node


def to_python(node: Node) -> object:
    """A node as plain Python values (iteratively: any depth the scanner allows)."""
    root: list[object] = [None]
    work: list[tuple[Node, object, object]] = [(node, root, 0)]
    while work:
        item, parent, slot = work.pop()
        item = as_node(item)
        kind = item.kind
        if kind == "obj":
            value: object = {}
            for key, child in item.value:  # type: ignore[attr-defined]
                work.append((child, value, key))
        elif kind == "arr":
            children = item.value
            value = [None] * len(children)  # type: ignore[arg-type]
            for index, child in enumerate(children):  # type: ignore[arg-type]
                work.append((child, value, index))
        elif kind == "num":
            literal = str(item.value)
            value = int(literal) if _INT.fullmatch(literal) else float(literal)
        else:
            value = item.value
        parent[slot] = value  # type: ignore[index]
    return root[0]


_INT = re.compile(r"-?[0-9]+")


def parse_json(data: bytes) -> object:
    """One JSON document (Go's json.Unmarshal: nothing but white space may follow it)."""
    fast = _fast(data)
    if fast is not None:
        return to_python(as_node(fast[0]))
    values = iter_values(data)
    first = next(values, None)
    if first is None:
        raise invalid_json("unexpected end of JSON input")
    rest = _WS.match(data, first.end).end()  # type: ignore[union-attr]
    if rest < len(data):
        after = f"invalid character {quote_char(data[rest])} after top-level value"
        raise invalid_json(f"{after} at offset {rest + 1}")
    return to_python(first)


def json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


# --- Go types ----------------------------------------------------------------------------------

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
        if not _INT.fullmatch(literal) or (not self.signed and literal.startswith("-")):
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


def go_quote(raw: bytes | str) -> str:
    """Go's %q of a string or byte string (strconv.Quote)."""
    text = raw.decode("utf-8", errors="surrogateescape") if isinstance(raw, bytes) else raw
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif code in _ESCAPES:
            out.append(_ESCAPES[code])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not char.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


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
    fast = _fast(data)
    if fast is not None:
        try:
            return _decode_values([as_node(fast[0])], data, go_type, root, exact=False)
        except _NeedExact:
            pass
    return _decode_values(iter_values(data), data, go_type, root, exact=True)


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
    fast = _fast(data)
    if fast is not None:
        try:
            return _unmarshal_node(as_node(fast[0]), data, go_type, root, exact=False)
        except _NeedExact:
            pass
    pos = _WS.match(data).end()  # type: ignore[union-attr]
    try:
        node, end = _scan_value(data, pos)
        rest = _WS.match(data, end).end()  # type: ignore[union-attr]
        if rest < len(data):
            raise _Syntax(f"invalid character {quote_char(data[rest])} after top-level value", rest + 1)
    except _Syntax as exc:
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
