"""Parser for the NATS config format: tokens in, a tree of positioned values out.

The tree is plain data: a `ConfigMap` (dict of key -> `Entry`), each entry holding the key's
position and a `Value` (scalar, list of `Value`, or nested `ConfigMap`) with its own position.
Loading options from the tree is `load.py`'s job; this module only knows the grammar.

Resolution happens while parsing, as in nats-server:

* `$NAME` looks in the enclosing maps, innermost first, at keys defined *above* the reference;
  then in the environment, whose value is re-parsed as a config value (`PORT=4222` is an int).
  A found key is marked `used_as_variable` so the loader does not call it an unknown field.
  Environment cycles (`A=$B`, `B=$A`) are reported, not followed.
* Unquoted `$2a$...` is a bcrypt hash taken literally; `$2b$`/`$2y$` are ordinary variables.
* `include path` parses `path` (relative to the including file's directory) with a fresh scope
  and merges its keys into the current map; include cycles and depth are bounded.

Purity: files are read only through the `read_file` function and the environment only through
the `env` mapping, both injected. The first syntax error of a file stops its parse and is raised
as `ConfigError([problem])`; `load.py` collects the semantic problems of a whole file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from appliance import limits
from appliance.config.lexer import LexError, Token, TokenKind, tokenize
from appliance.errors import ConfigError

Scalar = str | int | float | bool | datetime
ReadFile = Callable[[str], str]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_BCRYPT_PREFIX = "2a$"
_ENV_KEY = "pk"
_DECIMAL = 1000
_BINARY = 1024
_SIZE_SUFFIXES: dict[str, int] = {"": 1}
for _exponent, _letter in enumerate("kmgtpe", start=1):
    _SIZE_SUFFIXES[_letter] = _DECIMAL**_exponent
    for _binary_form in ("b", "i", "ib"):
        _SIZE_SUFFIXES[_letter + _binary_form] = _BINARY**_exponent


@dataclass(frozen=True, slots=True)
class Position:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(slots=True)
class Value:
    data: Scalar | list[Value] | ConfigMap
    position: Position
    used_as_variable: bool = False


@dataclass(slots=True)
class Entry:
    key: str
    key_position: Position
    value: Value


class ConfigMap(dict[str, Entry]):
    """Keys as written (exact case); the loader matches them case-insensitively."""


def to_plain(value: Value) -> object:
    """The value without positions: dicts, lists and scalars (for raw storage and tests)."""
    data = value.data
    if isinstance(data, ConfigMap):
        return {key: to_plain(entry.value) for key, entry in data.items()}
    if isinstance(data, list):
        return [to_plain(item) for item in data]
    return data


def read_text_file(path: str) -> str:
    """The default `read_file`: UTF-8 text, bounded by CONFIG_FILE_BYTES_MAX."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(limits.CONFIG_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise ConfigError([f"{path}: error opening config file: {error.strerror or error}"]) from error
    if len(raw) > limits.CONFIG_FILE_BYTES_MAX:
        raise ConfigError([f"{path}: config file larger than {limits.CONFIG_FILE_BYTES_MAX} bytes"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError([f"{path}: config file is not UTF-8 (byte {error.start})"]) from error


class _Frame:
    __slots__ = ("items", "mapping", "pending_key")

    def __init__(self, *, mapping: ConfigMap | None = None) -> None:
        self.mapping = mapping
        self.items: list[Value] = []
        self.pending_key: Token | None = None


@dataclass(slots=True)
class _Shared:
    """State shared by a parse and the parses it starts (includes, environment values)."""

    read_file: ReadFile
    env: Mapping[str, str]
    include_chain: list[str] = field(default_factory=list)
    env_references: set[str] = field(default_factory=set)


class _Parser:
    def __init__(self, text: str, *, filename: str, shared: _Shared) -> None:
        self.text = text
        self.filename = filename
        self.shared = shared
        self.root = ConfigMap()
        self.frames: list[_Frame] = [_Frame(mapping=self.root)]
        self.start_frame_token: list[Token] = []

    def position(self, token: Token) -> Position:
        return Position(self.filename, token.line, token.column)

    def fail(self, token: Token, message: str) -> ConfigError:
        return ConfigError([f"{self.position(token)}: {message}"])

    def parse(self) -> ConfigMap:
        if len(self.text) > limits.CONFIG_FILE_BYTES_MAX:
            raise ConfigError([f"{self.filename}: config larger than {limits.CONFIG_FILE_BYTES_MAX} bytes"])
        try:
            tokens = tokenize(self.text)
        except LexError as error:
            # nats-server's words ("Parse error on line N: '...'", which wrappers look for) after our position
            raise ConfigError([f"{self.filename}:{error.line}:{error.column}: Parse error on line {error.line}: "
                               f"'{error.message}'"]) from None
        for token in tokens:
            self.step(token)
        return self.root

    def step(self, token: Token) -> None:
        kind = token.kind
        frame = self.frames[-1]
        if kind is TokenKind.KEY:
            if frame.mapping is None or frame.pending_key is not None:
                pending = frame.pending_key
                raise self.fail(pending or token, f"missing value for key '{(pending or token).text}'")
            frame.pending_key = token
        elif kind is TokenKind.MAP_START:
            self.open(token, _Frame(mapping=ConfigMap()))
        elif kind is TokenKind.ARRAY_START:
            self.open(token, _Frame())
        elif kind in (TokenKind.MAP_END, TokenKind.ARRAY_END):
            self.close(token)
        elif kind is TokenKind.INCLUDE:
            self.include(token)
        elif kind is TokenKind.EOF:
            # a stray final "}" lexes as a key; nats-server lets it pass (JSON-like files)
            if frame.pending_key is not None and frame.pending_key.text != "}":
                raise self.fail(frame.pending_key, f"config is invalid: key '{frame.pending_key.text}' has no value")
        elif kind is TokenKind.VARIABLE:
            self.set_value(token, self.resolve_variable(token))
        else:
            self.set_value(token, Value(self.scalar(token), self.position(token)))

    def open(self, token: Token, frame: _Frame) -> None:
        if len(self.frames) >= limits.CONFIG_NESTING_DEPTH_MAX:
            raise self.fail(token, f"nesting deeper than {limits.CONFIG_NESTING_DEPTH_MAX} levels")
        self.frames.append(frame)
        self.start_frame_token.append(token)

    def close(self, token: Token) -> None:
        frame = self.frames.pop()
        start = self.start_frame_token.pop()
        if frame.pending_key is not None:
            raise self.fail(frame.pending_key, f"missing value for key '{frame.pending_key.text}'")
        data: list[Value] | ConfigMap = frame.items if frame.mapping is None else frame.mapping
        self.set_value(token, Value(data, self.position(start)))

    def set_value(self, token: Token, value: Value) -> None:
        frame = self.frames[-1]
        if frame.mapping is None:
            frame.items.append(value)
            return
        key = frame.pending_key
        if key is None:
            raise self.fail(token, "value without a key")
        frame.pending_key = None
        frame.mapping.pop(key.text, None)  # last wins, and takes the last place
        frame.mapping[key.text] = Entry(key.text, self.position(key), value)

    def scalar(self, token: Token) -> Scalar:
        kind, text = token.kind, token.text
        if kind is TokenKind.STRING:
            return text
        if kind is TokenKind.BOOL:
            return text.lower() in ("true", "yes", "on")
        if kind is TokenKind.INTEGER:
            return self.integer(token)
        if kind is TokenKind.FLOAT:
            try:
                return float(text)
            except ValueError:
                raise self.fail(token, f"expected float, but got '{text}'") from None
        assert kind is TokenKind.DATETIME, kind
        try:
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        except ValueError:
            raise self.fail(token, f"expected Zulu formatted DateTime, but got '{text}'") from None

    def integer(self, token: Token) -> int:
        text = token.text
        digits = len(text) - len(text.lstrip("-0123456789"))
        number_text, suffix = text[:digits], text[digits:].strip().lower()
        try:
            number = int(number_text, 10)
        except ValueError:
            raise self.fail(token, f"expected integer, but got '{text}'") from None
        if not INT64_MIN <= number <= INT64_MAX:
            raise self.fail(token, f"integer '{text}' is out of the range")
        multiplier = _SIZE_SUFFIXES.get(suffix)
        if multiplier is None:
            raise self.fail(token, f"invalid size suffix '{text[digits:]}' in '{text}'")
        result = number * multiplier
        if not INT64_MIN <= result <= INT64_MAX:
            raise self.fail(token, f"integer '{text}' is out of the range")
        return result

    # --- variables ----------------------------------------------------------------------------
    def resolve_variable(self, token: Token) -> Value:
        name = token.text
        position = self.position(token)
        if name.startswith(_BCRYPT_PREFIX):
            return Value("$" + name, position)
        for frame in reversed(self.frames):
            if frame.mapping is not None and name in frame.mapping:
                found = frame.mapping[name].value
                found.used_as_variable = True
                return Value(found.data, position)
        return self.resolve_from_env(token, position)

    def resolve_from_env(self, token: Token, position: Position) -> Value:
        name = token.text
        shared = self.shared
        if name in shared.env_references:
            raise self.fail(
                token,
                f"variable reference for '{name}' on line {token.line} could not be parsed: "
                f"variable reference cycle for '{name}'",
            )
        if name not in shared.env:
            raise self.fail(token, f"variable reference for '{name}' on line {token.line} can not be found")
        if len(shared.env_references) >= limits.CONFIG_ENV_EXPANSIONS_MAX:
            raise self.fail(token, f"more than {limits.CONFIG_ENV_EXPANSIONS_MAX} nested environment references")
        shared.env_references.add(name)
        try:
            sub = _Parser(f"{_ENV_KEY}={shared.env[name]}", filename=self.filename, shared=shared)
            mapping = sub.parse()
        except ConfigError as error:
            detail = "; ".join(error.problems)
            raise self.fail(
                token, f"variable reference for '{name}' on line {token.line} could not be parsed: {detail}"
            ) from None
        finally:
            shared.env_references.discard(name)
        entry = mapping.get(_ENV_KEY)
        if entry is None:
            raise self.fail(token, f"variable reference for '{name}' on line {token.line} can not be found")
        return Value(entry.value.data, position)

    # --- include ------------------------------------------------------------------------------
    def include(self, token: Token) -> None:
        frame = self.frames[-1]
        assert frame.mapping is not None, "the lexer only emits include where a key may start"
        base = os.path.dirname(self.filename) if self.filename else ""
        path = os.path.normpath(os.path.join(base or ".", token.text))
        chain = self.shared.include_chain
        identity = os.path.abspath(path)
        if identity in chain:
            cycle = " -> ".join([*chain[chain.index(identity):], identity])
            raise self.fail(token, f"include cycle: {cycle}")
        if len(chain) >= limits.CONFIG_INCLUDE_DEPTH_MAX:
            raise self.fail(token, f"includes nested deeper than {limits.CONFIG_INCLUDE_DEPTH_MAX} files")
        try:
            text = self.shared.read_file(path)
        except ConfigError as error:
            raise self.fail(token, f"error parsing include file '{token.text}', {'; '.join(error.problems)}") from None
        chain.append(identity)
        try:
            included = _Parser(text, filename=path, shared=self.shared).parse()
        finally:
            chain.pop()
        for key, entry in included.items():
            frame.mapping.pop(key, None)
            frame.mapping[key] = entry


def parse_text(
    text: str,
    *,
    filename: str,
    read_file: ReadFile = read_text_file,
    env: Mapping[str, str] | None = None,
) -> ConfigMap:
    """The tree of one config text; `filename` names it in positions and anchors its includes."""
    shared = _Shared(read_file=read_file, env=os.environ if env is None else env)
    if filename:
        shared.include_chain.append(os.path.abspath(os.path.normpath(filename)))
    return _Parser(text, filename=filename, shared=shared).parse()


def parse_file(
    path: str,
    *,
    read_file: ReadFile = read_text_file,
    env: Mapping[str, str] | None = None,
) -> ConfigMap:
    return parse_text(read_file(path), filename=path, read_file=read_file, env=env)
