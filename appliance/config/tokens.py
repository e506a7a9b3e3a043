"""The lexer's vocabulary and cursor: token types, character classes, and `Cursor`.

`Cursor` owns the position bookkeeping every lexer state shares (1-based line and column of the
token being built, the pending escaped parts of a string, the stack of states to return to) and
the comment state. The states themselves live in `lexer_scalars.py` (strings, numbers) and
`lexer.py` (structure); see `lexer.py` for the theory of operation.
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
WHITESPACE = " \t"
NEWLINE = "\n\r"
SIZE_SUFFIX_START = "kKmMgGtTpPeE"
BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off"})
ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
# after these a number is complete; any other rune turns the token into an unquoted string
NUMBER_END = frozenset("\n\r}; ,\t0123456789") | {EOF}
DATETIME_TAIL = "00-00T00:00:00Z"  # after "YYYY-"; '0' means any digit

# Fast paths: runs of characters that cannot change the state, consumed in one regex step.
BLANK_RUN = re.compile(r"[ \t\n\r]+")
KEY_RUN = re.compile(r"[A-Za-z0-9_.$>*\-]+")
UNQUOTED_RUN = re.compile(r"[^\\\n\r;,\]} \t']+")
DOUBLE_QUOTED_RUN = re.compile(r'[^"\\]+')
SINGLE_QUOTED_RUN = re.compile(r"[^']+")
COMMENT_RUN = re.compile(r"[^\n\r]+")
DIGIT_RUN = re.compile(r"[0-9]+")

State = Callable[[], "State | None"]


def is_space(ch: str) -> bool:
    """Go's unicode.IsSpace: ASCII whitespace, NEL, NBSP and the Unicode space separators."""
    if ch == EOF:
        return False
    return ch in "\t\n\v\f\r \x85\xa0" or (ord(ch) > 0xFF and ch.isspace())


def decode_raw_bytes(text: str) -> str:
    """Text whose surrogate escapes are raw bytes from `\\xHH`: decoded as UTF-8, invalid -> U+FFFD."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeError:
        return text


def show_char(ch: str) -> str:
    return "\\n" if ch == "\n" else ("EOF" if ch == EOF else ch)


class Cursor:
    """Position, token output and state stack of one lexing run."""

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
        self.string_state: State  # where an escape returns to; set when a string starts
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
            self.skip_run(BLANK_RUN)
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
                text = decode_raw_bytes(text)
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

    # --- comments -----------------------------------------------------------------------------
    def comment(self) -> State | None:
        self.skip_run(COMMENT_RUN)
        ch = self.peek()
        if ch == EOF or ch in NEWLINE:
            self.ignore()
            return self.pop()
        self.next()
        return self.comment

