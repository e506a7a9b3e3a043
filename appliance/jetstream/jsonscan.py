"""JSON scanning as Go's encoding/json reads it, for the JetStream API decoder (decode.py).

`iter_values` reads a body value by value as json.Decoder does (no recursion: nesting is bounded
at Go's 10,000 levels, "exceeded max depth"), with Go's syntax error texts and offsets, into
`Node`s that keep each value's raw bytes. `fast_document` first tries the C json module on one
plain valid document (values wrapped into nodes on demand by `as_node`). Pure: bytes in.
"""

from __future__ import annotations

import json
import json.scanner
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from appliance.jetstream import errors

MAX_DEPTH = 10_000  # Go's encoding/json maxNestingDepth
RUN_MIN_BYTES = 256  # array elements read in one C pass from this many bytes of plain scalars


def invalid_json(text: str) -> errors.JsApiError:
    return errors.INVALID_JSON.format(err=text)


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


class _Pairs(list):  # type: ignore[type-arg]
    """An object of the fast path: its (key, value) pairs in order, duplicates kept."""


class _Num(str):
    """A fractional or exponent number of the fast path: its literal text (integers stay int:
    their text is their digits, but for "-0")."""


def _reject_constant(name: str) -> object:
    raise ValueError(name)  # NaN and Infinity are not JSON: the exact scanner words the error


@dataclass(frozen=True, slots=True)
class FastResult:
    """What the C json module made of a body: `document` (one-tuple) when it is one plain valid
    document; else None, and `failed_at` the byte offset where the C scanner found the first value
    broken (-1: not known), so the exact scanner's syntax check need not find it again."""

    document: tuple[object] | None
    failed_at: int = -1
    first_valid: bool = False  # the first value is whole, something follows it


def fast_document(data: bytes) -> FastResult:
    """The body through the C json module when it is one plain valid document (otherwise the
    exact scanner reads it, errors and all)."""
    try:
        text = data.decode("utf-8")  # not UTF-8: the exact scanner keeps the bytes for the errors
    except ValueError:
        return FastResult(None)
    try:
        return FastResult((json.loads(
            text, object_pairs_hook=_Pairs, parse_float=_Num, parse_constant=_reject_constant
        ),))
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # the first value is whole
            return FastResult(None, first_valid=True)
        ascii_only = len(text) == len(data)  # character offsets are byte offsets
        return FastResult(None, exc.pos if ascii_only else -1)
    except (ValueError, RecursionError):
        return FastResult(None)


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


class JsonSyntaxError(Exception):
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


WHITESPACE = re.compile(rb"[ \t\r\n]*")
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


def _error(text: str, index: int) -> JsonSyntaxError:
    return JsonSyntaxError(text, index + 1)


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


def _quote_sequence(raw: bytes) -> str:
    """An escape sequence as Go's JSON errors show it: in backquotes, unless it holds a backquote,
    white space, a character that is not printable or not UTF-8 (then Go-quoted)."""
    text = raw.decode("utf-8", errors="replace")
    if any(c == "`" or c == "\ufffd" or c.isspace() or not c.isprintable() for c in text):
        return go_quote(raw)
    return f"`{text}`"


def _string_error(data: bytes, pos: int) -> JsonSyntaxError:
    i, n = pos + 1, len(data)
    while i < n:
        c = data[i]
        if c == 0x22:
            break
        if c < 0x20:
            return _error(f"invalid character {quote_char(c)} in string", i)
        if c == 0x5C:
            if i + 1 >= n:
                return JsonSyntaxError(_EOF)
            e = data[i + 1]
            if e == ord("u"):
                digits = data[i + 2 : i + 6]
                if len(digits) < 4:
                    return JsonSyntaxError(_EOF)
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
    return JsonSyntaxError(_EOF)


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
        raise JsonSyntaxError(_EOF)
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
            raise JsonSyntaxError(_EOF)
        if end < 0:
            index = -end - 2
            raise _error(f"invalid character {quote_char(data[index])} in numeric literal", index)
        return Node("num", literal, pos, end), end
    word = _LITERALS.get(c)
    if word is not None:
        for k, expected in enumerate(word):
            if pos + k >= n:
                raise JsonSyntaxError(_EOF)
            if data[pos + k] != expected:
                got = quote_char(data[pos + k])
                text = f"invalid character {got} in literal {word.decode()} (expecting '{chr(expected)}')"
                raise _error(text, pos + k)
        value = {b"true": True, b"false": False, b"null": None}[word]
        return Node("null" if value is None else "bool", value, pos, pos + len(word)), pos + len(word)
    raise _error(f"invalid character {quote_char(c)} looking for beginning of value", pos)


def _key(data: bytes, pos: int) -> tuple[str, int]:
    pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
    if pos >= len(data):
        raise JsonSyntaxError(_EOF)
    if data[pos] != 0x22:
        raise _error(
            f"invalid character {quote_char(data[pos])} looking for beginning of object key string", pos
        )
    key, pos = _string(data, pos)
    pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
    if pos >= len(data):
        raise JsonSyntaxError(_EOF)
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
    try:
        values = json.loads(chunk.decode("utf-8", errors="replace"), parse_float=_Num)
    except ValueError:  # an integer of over 4,300 digits: read it token by token
        return False, pos
    top.value.extend(values)  # type: ignore[attr-defined]
    return True, run.end()


def _c_scan(text: str, pos: int) -> tuple[int, int]:
    """The C scanner on the value at pos: (end, -1) when it is valid, else (-1, the position where
    the C scanner gave up, or len(text) when it cannot tell)."""
    try:
        return _C_SCANNER(text, pos)[1], -1
    except StopIteration as exc:
        return -1, int(exc.value)
    except json.JSONDecodeError as exc:
        return -1, exc.pos
    except (ValueError, RecursionError):  # NaN/Infinity, huge integers, deep nesting
        return -1, len(text)


def _reject_any(_: str) -> object:
    raise ValueError("not JSON")


_C_SCANNER = json.scanner.make_scanner(  # type: ignore[attr-defined]
    json.JSONDecoder(parse_constant=_reject_any)
)
_NUMBER_GOES_ON = frozenset(b".eE0123456789")
_SKIP_TRIES = 3  # commas tried back from where the C scanner failed


def _skip_valid(data: bytes, text: str, pos: int, depth: int) -> tuple[int, int]:
    """(the end of the value at pos, -1) when the C scanner proves it valid JSON (Go's syntax too:
    the same grammar, constants refused) within the depth bound; else (-1, where it failed)."""
    if depth + sys.getrecursionlimit() >= MAX_DEPTH:
        return -1, len(text)
    end, failed = _c_scan(text, pos)
    if end >= 0 and end < len(data) and data[end] in _NUMBER_GOES_ON and data[pos] not in b'[{"':
        return -1, end  # a number the C scanner ended early ("1.x"): Go reads on, the exact scanner words it
    return end, failed


def _skip_elements(text: str, start: int, failed: int, closer: str, depth: int) -> int:
    """In a container the C scanner failed on (from start, its opening byte): the position of a
    comma of its own level up to which every element is valid, or -1. A comma tried is the
    container's own when the text up to it, closed, parses (a comma inside a nested value or a
    string leaves that unclosed)."""
    if depth + sys.getrecursionlimit() >= MAX_DEPTH:
        return -1
    comma = failed
    for _ in range(_SKIP_TRIES):
        comma = text.rfind(",", start, comma)
        if comma < 0:
            return -1
        probe = text[start:comma] + closer
        end, _ = _c_scan(probe, 0)
        if end == len(probe):
            return comma
    return -1


def check_syntax(data: bytes, text: str, pos: int, failed_at: int = -1) -> int:
    """The end of the value at pos (after white space) when its syntax is valid; raises Go's
    JsonSyntaxError when not. Spans the C scanner proves valid are skipped, so a long body with a
    syntax error near its end is checked in a few C passes instead of token by token. failed_at:
    where the C scanner already found the value at pos broken (FastResult), or -1."""
    stack: list[Node] = []  # the open containers (nodes without values: depth and kind)
    n = len(data)
    while True:  # at a value
        pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
        if failed_at >= 0:  # the top-level value: the C scanner's verdict is known
            end, failed, failed_at = -1, failed_at, -1
        else:
            end, failed = _skip_valid(data, text, pos, len(stack)) if pos < n else (-1, n)
        if end >= 0:
            pos = end
        else:
            node, after = _value_start(data, pos, stack)  # Go's error, or the container pushed
            if node is not None:
                pos = after
            else:  # a container the C scanner failed on: into it
                opener = data[pos]
                closer = "}" if opener == 0x7B else "]"
                comma = _skip_elements(text, pos, failed, closer, len(stack))
                pos = WHITESPACE.match(data, after).end()  # type: ignore[union-attr]
                if pos >= n:
                    raise JsonSyntaxError(_EOF)
                if comma < 0 and data[pos] == ord(closer):
                    stack.pop()
                    pos += 1
                elif comma >= 0:
                    pos = comma + 1
                    if opener == 0x7B:
                        _, pos = _key(data, pos)
                    continue
                else:
                    if opener == 0x7B:
                        _, pos = _key(data, pos)
                    continue
        while True:  # after a complete value: a delimiter
            if not stack:
                return pos
            opener = 0x7B if stack[-1].kind == "obj" else 0x5B
            pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                raise JsonSyntaxError(_EOF)
            c = data[pos]
            if c == 0x2C:
                pos += 1
                if opener == 0x7B:
                    _, pos = _key(data, pos)
                break
            if c == opener + 2:  # } after {, ] after [
                stack.pop()
                pos += 1
                continue
            raise _delimiter_error(opener == 0x7B, c, pos)


def _delimiter_error(in_object: bool, c: int, pos: int) -> JsonSyntaxError:
    where = "after object key:value pair" if in_object else "after array element"
    return _error(f"invalid character {quote_char(c)} {where}", pos)


def scan_value(
    data: bytes, pos: int, text: str | None = None, failed_at: int = -1, *, valid: bool = False
) -> tuple[Node, int]:
    """One whole JSON value from pos (after white space), iteratively. Unless known `valid`, its
    syntax is checked first (check_syntax; text is the body decoded as latin-1, one character a
    byte), so a syntax error costs no nodes."""
    if not valid:
        check_syntax(data, data.decode("latin-1") if text is None else text, pos, failed_at)
    return build_value(data, pos)


def build_value(data: bytes, pos: int) -> tuple[Node, int]:
    """The nodes of the value at pos, token by token (raises Go's syntax errors itself too)."""
    stack: list[Node] = []
    keys: list[str] = []
    n = len(data)
    while True:
        pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
        node, pos = _value_start(data, pos, stack)
        if node is None:  # an opened container: empty, or its first key / element
            top = stack[-1]
            pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                raise JsonSyntaxError(_EOF)
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
            pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
            if pos >= n:
                raise JsonSyntaxError(_EOF)
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
            raise _delimiter_error(top.kind == "obj", c, pos)


def iter_values(data: bytes, failed_at: int = -1, *, first_valid: bool = False) -> Iterator[Node]:
    """Each JSON value of the body in turn, as Go's json.Decoder reads them (raises JsApiError);
    failed_at and first_valid: FastResult's, on the first value."""
    pos, n = 0, len(data)
    text = data.decode("latin-1")
    while True:
        pos = WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            return
        try:
            node, pos = scan_value(data, pos, text, failed_at, valid=first_valid)
            failed_at, first_valid = -1, False
        except JsonSyntaxError as exc:
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
            value = int(literal) if INTEGER.fullmatch(literal) else float(literal)
        else:
            value = item.value
        parent[slot] = value  # type: ignore[index]
    return root[0]


INTEGER = re.compile(r"-?[0-9]+")


def parse_json(data: bytes) -> object:
    """One JSON document (Go's json.Unmarshal: nothing but white space may follow it)."""
    fast = fast_document(data)
    if fast.document is not None:
        return to_python(as_node(fast.document[0]))
    values = iter_values(data, fast.failed_at, first_valid=fast.first_valid)
    first = next(values, None)
    if first is None:
        raise invalid_json("unexpected end of JSON input")
    rest = WHITESPACE.match(data, first.end).end()  # type: ignore[union-attr]
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
