"""Lexer for the NATS config format: text in, a list of positioned tokens out.

Theory of operation. The format is context sensitive (a `{` opens a map after a key but is part
of an unquoted string inside a value; `2m` is an integer but `2ms` a string), so the lexer is a
state machine with an explicit stack of "where to go after this value" states, the shape of
nats-server's `conf/lex.go`. Each state is a method that consumes characters and returns the next
state; `_return()` pops the stack. The quirks users rely on are kept on purpose:

* separators `=`, `:` or plain whitespace; a top-level `{ ... }` wrapper is optional;
* unquoted strings end at whitespace, newline, `,` `;` `]` `}` (and a `'`); `true/yes/on` etc.
  are booleans, `$NAME` a variable reference;
* a token starting with a digit is an integer (`2m` = 2,000,000 via size suffixes), a float, a
  Zulu datetime, an IP-ish string (`127.0.0.1:4222`) or, once a non-number rune appears, a
  string (`30s`) — but `]` does not end a number, so `[1]` is an error exactly as in nats-server;
* double-quoted strings take only `\\t \\n \\r \\" \\\\ \\xHH` escapes; single-quoted are raw;
* `( ... )` is a raw block that ends at a `)` alone on its line;
* `include path` is a keyword wherever a key may start.

Columns are 1-based (nats-server reports column 0 on the first line and 1-based columns after).
Nothing here reads files or the environment: that is `parser.py`'s job.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from appliance import limits


class TokenKind(enum.Enum):
    KEY = "key"
    STRING = "string"
    BOOL = "bool"
    INTEGER = "integer"
    FLOAT = "float"
    DATETIME = "datetime"
    ARRAY_START = "["
    ARRAY_END = "]"
    MAP_START = "{"
    MAP_END = "}"
    VARIABLE = "variable"
    INCLUDE = "include"
    EOF = "eof"


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    line: int
    column: int


class LexError(Exception):
    """A syntax error at (line, column); the parser turns it into a ConfigError problem."""

    def __init__(self, message: str, *, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


EOF = ""
_WHITESPACE = " \t"
_NEWLINE = "\n\r"
_SIZE_SUFFIX_START = "kKmMgGtTpPeE"
_BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off"})
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
# after these a number is complete; any other rune turns the token into an unquoted string
_NUMBER_END = frozenset("\n\r}; ,\t0123456789") | {EOF}
_DATETIME_TAIL = "00-00T00:00:00Z"  # after "YYYY-"; '0' means any digit

# Fast paths: runs of characters that cannot change the state, consumed in one regex step.
_BLANK_RUN = re.compile(r"[ \t\n\r]+")
_KEY_RUN = re.compile(r"[A-Za-z0-9_.$>*\-]+")
_UNQUOTED_RUN = re.compile(r"[^\\\n\r;,\]} \t']+")
_DOUBLE_QUOTED_RUN = re.compile(r'[^"\\]+')
_SINGLE_QUOTED_RUN = re.compile(r"[^']+")
_COMMENT_RUN = re.compile(r"[^\n\r]+")
_DIGIT_RUN = re.compile(r"[0-9]+")

State = Callable[[], "State | None"]


def is_space(ch: str) -> bool:
    """Go's unicode.IsSpace: ASCII whitespace, NEL, NBSP and the Unicode space separators."""
    if ch == EOF:
        return False
    return ch in "\t\n\v\f\r \x85\xa0" or (ord(ch) > 0xFF and ch.isspace())


def _decode_raw_bytes(text: str) -> str:
    """Text whose surrogate escapes are raw bytes from `\\xHH`: decoded as UTF-8, invalid -> U+FFFD."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeError:
        return text


def _show(ch: str) -> str:
    return "\\n" if ch == "\n" else ("EOF" if ch == EOF else ch)


class Lexer:
    """Turns one config text into tokens. Use `tokenize(text)`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.start = 0
        self.line = 1
        self.line_start = 0  # index of the first character of the current line
        self.start_line = 1
        self.start_column = 1
        self.parts: list[str] = []  # decoded pieces of a string with escapes
        self.raw_bytes = False  # a \xHH escape >= 0x80 is in `parts`
        self.string_state: State = self.unquoted_string
        self.stack: list[State] = []
        self.tokens: list[Token] = []

    # --- cursor -------------------------------------------------------------------------------
    def next(self) -> str:
        if self.pos >= len(self.text):
            self.pos = len(self.text) + 1  # so that backup() after EOF is symmetric
            return EOF
        ch = self.text[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
            self.line_start = self.pos
        return ch

    def backup(self) -> None:
        assert self.pos > 0
        self.pos -= 1
        if self.pos < len(self.text) and self.text[self.pos] == "\n":
            self.line -= 1
            previous_newline = self.text.rfind("\n", 0, self.pos)
            self.line_start = previous_newline + 1

    def peek(self) -> str:
        ch = self.next()
        self.backup()
        return ch

    def skip_run(self, pattern: re.Pattern[str]) -> None:
        """Consumes the longest run `pattern` matches at the cursor, keeping line numbers right."""
        match = pattern.match(self.text, self.pos)
        if match is None:
            return
        end = match.end()
        newlines = self.text.count("\n", self.pos, end)
        if newlines:
            self.line += newlines
            self.line_start = self.text.rfind("\n", self.pos, end) + 1
        self.pos = end

    def skip_blanks(self) -> None:
        """Skips ASCII blanks and newlines where all whitespace is insignificant."""
        if self.pos < len(self.text) and self.text[self.pos] in " \t\n\r":
            self.skip_run(_BLANK_RUN)
            self.ignore()

    def ignore(self) -> None:
        self.pos = min(self.pos, len(self.text))
        self.start = self.pos
        self.start_line = self.line
        self.start_column = self.pos - self.line_start + 1
        self.parts = []
        self.raw_bytes = False

    def ignore_quote(self) -> None:
        """Skips an opening quote; the token's column stays at the quote, where users look."""
        self.ignore()
        self.start_column -= 1

    def error(self, message: str) -> LexError:
        column = min(self.pos, len(self.text)) - self.line_start + 1
        return LexError(message, line=self.line, column=max(column, 1))

    def emit(self, kind: TokenKind, text: str | None = None) -> None:
        end = min(self.pos, len(self.text))
        if text is None:
            text = "".join(self.parts) + self.text[self.start:end]
            if self.raw_bytes:
                text = _decode_raw_bytes(text)
        self.tokens.append(Token(kind, text, self.start_line, self.start_column))
        self.ignore()

    def push(self, state: State) -> None:
        if len(self.stack) >= limits.CONFIG_NESTING_DEPTH_MAX:
            raise self.error(f"nesting deeper than {limits.CONFIG_NESTING_DEPTH_MAX} levels")
        self.stack.append(state)

    def pop(self) -> State:
        assert self.stack, "lexer state stack underflow"
        return self.stack.pop()

    def comment_then(self, state: State) -> State:
        self.push(state)
        return self.comment

    def is_comment_start(self, ch: str) -> bool:
        """After reading `ch`: True (and positioned after it) when a `#` or `//` comment starts."""
        if ch == "#":
            return True
        if ch == "/":
            if self.next() == "/":
                return True
            self.backup()
        return False

    # --- top level ----------------------------------------------------------------------------
    def top(self) -> State | None:
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.top
        if ch == "{":
            self.push(self.top)
            self.ignore()
            return self.braced_start
        if self.is_comment_start(ch):
            return self.comment_then(self.top)
        if ch == "/" or ch == EOF:
            self.end_of_input()
            return None
        self.backup()
        self.ignore()
        self.push(self.top_value_end)
        return self.key_start

    def end_of_input(self) -> None:
        if min(self.pos, len(self.text)) > self.start:
            raise self.error("Unexpected EOF.")
        self.emit(TokenKind.EOF, "")
        return None

    def top_value_end(self) -> State | None:
        ch = self.next()
        if self.is_comment_start(ch):
            return self.comment_then(self.top)
        if ch in _WHITESPACE and ch != EOF or ch == "/":
            return self.top_value_end
        if ch == EOF or ch in "\n\r;,}":
            self.ignore()
            return self.top
        raise self.error(
            f"Expected a top-level value to end with a new line, comment or EOF, but got '{_show(ch)}' instead."
        )

    def braced_start(self) -> State | None:
        """Inside an optional top-level `{ ... }` wrapper."""
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.braced_start
        if ch == "{":
            self.push(self.braced_end)
            self.ignore()
            return self.braced_start
        if ch == "}":
            self.ignore()
            return self.pop()
        if self.is_comment_start(ch):
            return self.comment_then(self.braced_start)
        if ch == "/" or ch == EOF:
            self.end_of_input()
            return None
        self.backup()
        self.ignore()
        self.push(self.braced_value_end)
        return self.key_start

    def braced_value_end(self) -> State | None:
        ch = self.next()
        if self.is_comment_start(ch):
            return self.comment_then(self.braced_value_end)
        if ch != EOF and (ch in _WHITESPACE or ch == "/"):
            return self.braced_value_end
        if ch != EOF and ch in "\n\r;,":
            self.ignore()
            return self.braced_start
        if ch == "}":
            self.backup()
            return self.braced_end
        raise self.error(
            f"Expected a block-level value to end with a new line, comment or EOF, but got '{_show(ch)}' instead."
        )

    def braced_end(self) -> State | None:
        ch = self.next()
        if self.is_comment_start(ch):
            return self.comment_then(self.braced_start)
        if ch != EOF and (ch in _NEWLINE or ch in _WHITESPACE or ch == "/"):
            return self.braced_end
        if ch != EOF and ch in ";,":
            self.ignore()
            return self.braced_start
        if ch == "}":
            self.ignore()
            return self.pop()
        raise self.error(f"Expected a block-level to end with a '}}', but got '{_show(ch)}' instead.")

    # --- keys ---------------------------------------------------------------------------------
    def key_start(self) -> State | None:
        self.skip_blanks()
        ch = self.peek()
        if ch in ("=", ":"):
            raise self.error(f"Unexpected key separator '{ch}'")
        if is_space(ch):
            self.next()
            self.ignore()
            return self.key_start
        if ch in ('"', "'"):
            self.next()
            self.ignore_quote()
            return self.quoted_key(ch, self.key_end)
        self.ignore()
        self.next()
        return self.bare_key

    def quoted_key(self, quote: str, after: State) -> State:
        def state() -> State | None:
            ch = self.peek()
            if ch == EOF:
                raise self.error("Unexpected EOF processing quoted key.")
            if ch == quote:
                self.emit(TokenKind.KEY)
                self.next()
                self.ignore()
                return after
            self.next()
            return state

        return state

    def bare_key(self) -> State | None:
        self.skip_run(_KEY_RUN)
        ch = self.peek()
        if is_space(ch):
            return self.maybe_include(self.key_end, None)
        if ch in ("=", ":") or ch == EOF:
            self.emit(TokenKind.KEY)
            return self.key_end
        self.next()
        return self.bare_key

    def maybe_include(self, after_key: State, after_include: State | None) -> State:
        if self.text[self.start:self.pos].lower() == "include":
            self.ignore()
            if after_include is not None:
                self.push(after_include)
            return self.include_start
        self.emit(TokenKind.KEY)
        return after_key

    def key_end(self) -> State | None:
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.key_end
        if ch in ("=", ":") and ch != EOF:
            self.ignore()
            return self.value
        if ch == EOF:
            self.emit(TokenKind.EOF, "")
            return None
        self.backup()
        return self.value

    # --- include ------------------------------------------------------------------------------
    def include_start(self) -> State | None:
        ch = self.next()
        if ch != EOF and ch in _WHITESPACE:
            self.ignore()
            return self.include_start
        self.backup()
        return self.include_value

    def include_value(self) -> State | None:
        ch = self.next()
        if ch in ('"', "'"):
            self.ignore()
            return self.quoted_include(ch)
        problems = {"[": "start of an array", "{": "start of a map", "(": "start of a block", "\\": "escape sequence"}
        if ch in problems:
            raise self.error(f"Expected include value but found {problems[ch]}")
        if ch.isdigit() or ch == "-":
            raise self.error("Expected include value but found start of a number")
        if ch != EOF and ch in _NEWLINE:
            raise self.error("Expected include value but found new line")
        self.backup()
        self.ignore()
        return self.bare_include

    def quoted_include(self, quote: str) -> State:
        def state() -> State | None:
            ch = self.next()
            if ch == EOF:
                raise self.error("Unexpected EOF in quoted include")
            if ch == quote:
                self.backup()
                self.emit(TokenKind.INCLUDE)
                self.next()
                self.ignore()
                return self.pop()
            return state

        return state

    def bare_include(self) -> State | None:
        ch = self.next()
        if ch == EOF or ch in "\n\r;} \t":
            self.backup()
            self.emit(TokenKind.INCLUDE)
            return self.pop()
        if ch == "'":
            self.backup()
            self.emit(TokenKind.INCLUDE)
            self.next()
            self.ignore()
            return self.pop()
        return self.bare_include

    # --- values -------------------------------------------------------------------------------
    def value(self) -> State | None:
        ch = self.next()
        if ch != EOF and ch in _WHITESPACE:
            self.ignore()
            return self.value
        if ch == "[":
            self.ignore()
            self.emit(TokenKind.ARRAY_START, "[")
            return self.array_value
        if ch == "{":
            self.ignore()
            self.emit(TokenKind.MAP_START, "{")
            return self.map_key_start
        if ch == "'":
            self.ignore_quote()
            return self.single_quoted
        if ch == '"':
            self.ignore_quote()
            self.string_state = self.double_quoted
            return self.double_quoted
        if ch == "-":
            return self.negative_number_start
        if ch == "(":
            self.ignore()
            return self.block
        if ch.isdigit() and ch.isascii():
            return self.number
        if ch == ".":
            raise self.error("Floats must start with a digit")
        if ch != EOF and ch in _NEWLINE:
            raise self.error("Expected value but found new line")
        self.backup()
        self.ignore()
        self.string_state = self.unquoted_string
        return self.unquoted_string

    def array_value(self) -> State | None:
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.array_value
        if self.is_comment_start(ch):
            return self.comment_then(self.array_value)
        if ch in (",", "/"):
            raise self.error("Unexpected array value terminator ','.")
        if ch == "]":
            return self.array_end
        self.backup()
        self.ignore()
        self.push(self.array_value_end)
        return self.value

    def array_value_end(self) -> State | None:
        ch = self.next()
        if ch != EOF and ch in _WHITESPACE:
            self.ignore()
            return self.array_value_end
        if self.is_comment_start(ch):
            return self.comment_then(self.array_value_end)
        if ch != EOF and ch in ",/\n\r":
            self.ignore()
            return self.array_value
        if ch == "]":
            return self.array_end
        raise self.error(
            f"Expected an array value terminator \",\" or an array terminator \"]\", but got '{_show(ch)}' instead."
        )

    def array_end(self) -> State | None:
        self.ignore()
        self.emit(TokenKind.ARRAY_END, "]")
        return self.pop()

    def map_key_start(self) -> State | None:
        self.skip_blanks()
        ch = self.peek()
        if ch in ("=", ":") and ch != EOF:
            raise self.error(f"Unexpected key separator '{ch}'.")
        if ch == "]":
            raise self.error("Unexpected array end ']' processing map.")
        if is_space(ch):
            self.next()
            self.ignore()
            return self.map_key_start
        if ch == "}":
            self.next()
            return self.map_end
        if ch == EOF:
            raise self.error("Unexpected EOF processing map.")
        self.next()
        if self.is_comment_start(ch):
            return self.comment_then(self.map_key_start)
        if ch in ('"', "'"):
            self.ignore_quote()
            return self.quoted_key(ch, self.map_key_end)
        self.backup()
        self.ignore()
        self.next()
        return self.map_key

    def map_key(self) -> State | None:
        self.skip_run(_KEY_RUN)
        ch = self.peek()
        if ch == EOF:
            raise self.error("Unexpected EOF processing map key.")
        if is_space(ch):
            return self.maybe_include(self.map_key_end, self.map_value_end)
        if ch in ("=", ":"):
            self.emit(TokenKind.KEY)
            return self.map_key_end
        self.next()
        return self.map_key

    def map_key_end(self) -> State | None:
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.map_key_end
        if ch in ("=", ":") and ch != EOF:
            self.ignore()
            return self.map_value
        self.backup()
        return self.map_value

    def map_value(self) -> State | None:
        self.skip_blanks()
        ch = self.next()
        if is_space(ch):
            self.ignore()
            return self.map_value
        if ch == ",":
            raise self.error("Unexpected map value terminator ','.")
        if ch == "}":
            return self.map_end
        self.backup()
        self.ignore()
        self.push(self.map_value_end)
        return self.value

    def map_value_end(self) -> State | None:
        ch = self.next()
        if ch != EOF and ch in _WHITESPACE:
            self.ignore()
            return self.map_value_end
        if self.is_comment_start(ch):
            return self.comment_then(self.map_value_end)
        if ch != EOF and ch in ";,/\n\r":
            self.ignore()
            return self.map_key_start
        if ch == "}":
            return self.map_end
        raise self.error(
            f"Expected a map value terminator \",\" or a map terminator \"}}\", but got '{_show(ch)}' instead."
        )

    def map_end(self) -> State | None:
        self.ignore()
        self.emit(TokenKind.MAP_END, "}")
        return self.pop()

    # --- strings ------------------------------------------------------------------------------
    def single_quoted(self) -> State | None:
        self.skip_run(_SINGLE_QUOTED_RUN)
        ch = self.next()
        if ch == EOF:
            raise self.error("Unexpected EOF.")
        if ch == "'":
            self.backup()
            self.emit(TokenKind.STRING)
            self.next()
            self.ignore()
            return self.pop()
        return self.single_quoted

    def double_quoted(self) -> State | None:
        self.skip_run(_DOUBLE_QUOTED_RUN)
        ch = self.next()
        if ch == "\\":
            self.keep_part(offset=1)
            return self.escape
        if ch == '"':
            self.backup()
            self.emit(TokenKind.STRING)
            self.next()
            self.ignore()
            return self.pop()
        if ch == EOF:
            raise self.error("Unexpected EOF.")
        return self.double_quoted

    def unquoted_string(self) -> State | None:
        self.skip_run(_UNQUOTED_RUN)
        ch = self.next()
        if ch == "\\":
            self.keep_part(offset=1)
            return self.escape
        if ch == EOF or ch in "\n\r;,]} \t":
            self.backup()
            self.emit_unquoted()
            return self.pop()
        if ch == "'":
            self.backup()
            self.emit(TokenKind.STRING)
            self.next()
            self.ignore()
            return self.pop()
        return self.unquoted_string

    def emit_unquoted(self) -> None:
        raw = self.text[self.start:min(self.pos, len(self.text))]
        if self.parts:
            self.emit(TokenKind.STRING)
        elif raw.lower() in _BOOLEANS:
            self.emit(TokenKind.BOOL)
        elif raw.startswith("$"):
            self.emit(TokenKind.VARIABLE, raw[1:])
        else:
            self.emit(TokenKind.STRING)

    def keep_part(self, *, offset: int) -> None:
        """Moves the raw text before the current escape into `parts`; the escape is decoded next."""
        self.parts.append(self.text[self.start:self.pos - offset])
        self.start = self.pos

    def escape(self) -> State | None:
        ch = self.next()
        if ch == "x":
            return self.hex_escape
        if ch in _ESCAPES and ch != EOF:
            self.parts.append(_ESCAPES[ch])
            self.start = self.pos
            return self.string_state
        raise self.error(
            f"Invalid escape character '{_show(ch)}'. Only the following escape characters are allowed: "
            "\\xXX, \\t, \\n, \\r, \\\", \\\\."
        )

    def hex_escape(self) -> State | None:
        """`\\xHH` is one raw byte, as in nats-server: `"\\xc3\\xa9"` is "é" (UTF-8 decoded at emit)."""
        digits = ""
        for _ in range(2):
            ch = self.next()
            if ch == EOF or ch in _NEWLINE:
                raise self.error("Expected two hexadecimal digits after '\\x', but hit end of line")
            digits += ch
        if not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.error(f"Expected two hexadecimal digits after '\\x', but got '{digits}'")
        byte = int(digits, 16)
        # bytes >= 0x80 ride as surrogate escapes until the token is complete
        self.parts.append(chr(byte) if byte < 0x80 else chr(0xDC00 + byte))
        self.raw_bytes = self.raw_bytes or byte >= 0x80
        self.start = self.pos
        return self.string_state

    def block(self) -> State | None:
        """A raw `( ... )` block: ends at a `)` alone on its line (newline or EOF after it)."""
        ch = self.next()
        if ch == EOF:
            raise self.error("Unexpected EOF processing block.")
        if ch == ")" and self.text[self.pos - 2] == "\n":
            after = self.next()
            if after == EOF or after == "\n":
                self.backup()
                self.backup()
                self.emit(TokenKind.STRING)
                self.next()
                self.ignore()
                return self.pop()
            self.backup()
        return self.block

    # --- numbers ------------------------------------------------------------------------------
    def number(self) -> State | None:
        self.skip_run(_DIGIT_RUN)
        ch = self.next()
        if ch == "-":
            if self.pos - self.start != 5:
                raise self.error("All ISO8601 dates must be in full Zulu form.")
            return self.datetime_tail
        if ch.isdigit() and ch.isascii():
            return self.number
        if ch == ".":
            return self.float_start
        if ch != EOF and ch in _SIZE_SUFFIX_START:
            return self.size_suffix
        if ch not in _NUMBER_END:
            self.string_state = self.unquoted_string
            return self.unquoted_string
        self.backup()
        self.emit(TokenKind.INTEGER)
        return self.pop()

    def size_suffix(self) -> State | None:
        ch = self.next()
        if ch != EOF and ch in "bBiI":
            return self.size_suffix
        self.backup()
        if ch in _NUMBER_END:
            self.emit(TokenKind.INTEGER)
            return self.pop()
        self.string_state = self.unquoted_string
        return self.unquoted_string

    def datetime_tail(self) -> State | None:
        for expected in _DATETIME_TAIL:
            ch = self.next()
            if expected == "0":
                if not (ch.isdigit() and ch.isascii()):
                    raise self.error(f"Expected digit in ISO8601 datetime, but found '{_show(ch)}' instead.")
            elif ch != expected:
                raise self.error(f"Expected '{expected}' in ISO8601 datetime, but found '{_show(ch)}' instead.")
        self.emit(TokenKind.DATETIME)
        return self.pop()

    def negative_number_start(self) -> State | None:
        ch = self.next()
        if not (ch.isdigit() and ch.isascii()):
            if ch == ".":
                raise self.error("Floats must start with a digit, not '.'.")
            raise self.error(f"Expected a digit but got '{_show(ch)}'.")
        return self.negative_number

    def negative_number(self) -> State | None:
        self.skip_run(_DIGIT_RUN)
        ch = self.next()
        if ch.isdigit() and ch.isascii():
            return self.negative_number
        if ch == ".":
            return self.float_start
        if ch != EOF and ch in _SIZE_SUFFIX_START:
            return self.size_suffix
        self.backup()
        self.emit(TokenKind.INTEGER)
        return self.pop()

    def float_start(self) -> State | None:
        ch = self.next()
        if not (ch.isdigit() and ch.isascii()):
            raise self.error(f"Floats must have a digit after the '.', but got '{_show(ch)}' instead.")
        return self.float_digits

    def float_digits(self) -> State | None:
        self.skip_run(_DIGIT_RUN)
        ch = self.next()
        if ch.isdigit() and ch.isascii():
            return self.float_digits
        if ch == ".":
            return self.ip_address
        self.backup()
        self.emit(TokenKind.FLOAT)
        return self.pop()

    def ip_address(self) -> State | None:
        ch = self.next()
        if ch != EOF and (ch in ".:-" or (ch.isdigit() and ch.isascii())):
            return self.ip_address
        self.backup()
        self.emit(TokenKind.STRING)
        return self.pop()

    # --- comments -----------------------------------------------------------------------------
    def comment(self) -> State | None:
        self.skip_run(_COMMENT_RUN)
        ch = self.peek()
        if ch == EOF or ch in _NEWLINE:
            self.ignore()
            return self.pop()
        self.next()
        return self.comment


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with an EOF token; raises LexError at the first syntax error."""
    lexer = Lexer(text)
    state: State | None = lexer.top
    while state is not None:
        state = state()
    return lexer.tokens
