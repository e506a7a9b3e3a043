"""Lexer for the NATS config format: text in, a list of positioned tokens out.

Theory of operation. The format is context sensitive (a `{` opens a map after a key but is part
of an unquoted string inside a value; `2m` is an integer but `2ms` a string), so the lexer is a
state machine with an explicit stack of "where to go after this value" states, the shape of
nats-server's `conf/lex.go`. Each state is a method that consumes characters and returns the next
state; `pop()` returns to the state that pushed. Runs of characters that cannot change the state
(key characters, string bodies, comments, digits) are consumed with one regex step. The quirks
users rely on are kept on purpose, checked against nats-server in tests/config/test_differential*:

* separators `=`, `:` or plain whitespace; a top-level `{ ... }` wrapper is optional;
* unquoted strings end at whitespace, newline, `,` `;` `]` `}` (and a `'`); `true/yes/on` etc.
  are booleans, `$NAME` a variable reference; a backslash escape works in them too;
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

from appliance.config.lexer_scalars import ScalarStates
from appliance.config.tokens import (
    NEWLINE,
    WHITESPACE,
    KEY_RUN,
    EOF,
    LexError,
    State,
    Token,
    TokenKind,
    show_char,
    is_space,
)

__all__ = ["LexError", "Lexer", "Token", "TokenKind", "tokenize"]


class Lexer(ScalarStates):
    """Turns one config text into tokens. Use `tokenize(text)`."""

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
        if ch in WHITESPACE and ch != EOF or ch == "/":
            return self.top_value_end
        if ch == EOF or ch in "\n\r;,}":
            self.ignore()
            return self.top
        raise self.error(
            f"Expected a top-level value to end with a new line, comment or EOF, but got '{show_char(ch)}' instead."
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
        if ch != EOF and (ch in WHITESPACE or ch == "/"):
            return self.braced_value_end
        if ch != EOF and ch in "\n\r;,":
            self.ignore()
            return self.braced_start
        if ch == "}":
            self.backup()
            return self.braced_end
        raise self.error(
            f"Expected a block-level value to end with a new line, comment or EOF, but got '{show_char(ch)}' instead."
        )

    def braced_end(self) -> State | None:
        ch = self.next()
        if self.is_comment_start(ch):
            return self.comment_then(self.braced_start)
        if ch != EOF and (ch in NEWLINE or ch in WHITESPACE or ch == "/"):
            return self.braced_end
        if ch != EOF and ch in ";,":
            self.ignore()
            return self.braced_start
        if ch == "}":
            self.ignore()
            return self.pop()
        raise self.error(f"Expected a block-level to end with a '}}', but got '{show_char(ch)}' instead.")

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
        self.skip_run(KEY_RUN)
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
        if ch != EOF and ch in WHITESPACE:
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
        if ch != EOF and ch in NEWLINE:
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
        if ch != EOF and ch in WHITESPACE:
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
        if ch != EOF and ch in NEWLINE:
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
        if ch != EOF and ch in WHITESPACE:
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
            f"Expected an array value terminator \",\" or an array terminator \"]\", but got '{show_char(ch)}' instead."
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
        self.skip_run(KEY_RUN)
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
        if ch != EOF and ch in WHITESPACE:
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
            f"Expected a map value terminator \",\" or a map terminator \"}}\", but got '{show_char(ch)}' instead."
        )

    def map_end(self) -> State | None:
        self.ignore()
        self.emit(TokenKind.MAP_END, "}")
        return self.pop()


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with an EOF token; raises LexError at the first syntax error."""
    lexer = Lexer(text)
    state: State | None = lexer.top
    while state is not None:
        state = state()
    return lexer.tokens
