"""Lexer states for scalar values: quoted/unquoted strings, escapes, raw blocks and numbers.

Numbers follow nats-server's lexer: digits then an optional size suffix (`k`, `kb`, `ki`, `kib`,
... up to `e`), a float, a Zulu datetime, an IP-like string (`127.0.0.1:4222`), or — as soon as a
rune that cannot belong to a number appears — an unquoted string (`30s`, `1h30m`).
"""

from __future__ import annotations

from appliance.config.tokens import (
    BOOLEANS,
    DATETIME_TAIL,
    DIGIT_RUN,
    DOUBLE_QUOTED_RUN,
    ESCAPES,
    NEWLINE,
    NUMBER_END,
    SINGLE_QUOTED_RUN,
    SIZE_SUFFIX_START,
    UNQUOTED_RUN,
    EOF,
    Cursor,
    State,
    TokenKind,
    show_char,
)


class ScalarStates(Cursor):
    """The states that lex one scalar value; each returns the next state or pops the stack."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.string_state = self.unquoted_string

    # --- strings ------------------------------------------------------------------------------
    def single_quoted(self) -> State | None:
        self.skip_run(SINGLE_QUOTED_RUN)
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
        self.skip_run(DOUBLE_QUOTED_RUN)
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
        self.skip_run(UNQUOTED_RUN)
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
        elif raw.lower() in BOOLEANS:
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
        if ch in ESCAPES and ch != EOF:
            self.parts.append(ESCAPES[ch])
            self.start = self.pos
            return self.string_state
        raise self.error(
            f"Invalid escape character '{show_char(ch)}'. Only the following escape characters are allowed: "
            "\\xXX, \\t, \\n, \\r, \\\", \\\\."
        )

    def hex_escape(self) -> State | None:
        """`\\xHH` is one raw byte, as in nats-server: `"\\xc3\\xa9"` is "é" (UTF-8 decoded at emit)."""
        digits = ""
        for _ in range(2):
            ch = self.next()
            if ch == EOF or ch in NEWLINE:
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
        self.skip_run(DIGIT_RUN)
        ch = self.next()
        if ch == "-":
            if self.pos - self.start != 5:
                raise self.error("All ISO8601 dates must be in full Zulu form.")
            return self.datetime_tail
        if ch.isdigit() and ch.isascii():
            return self.number
        if ch == ".":
            return self.float_start
        if ch != EOF and ch in SIZE_SUFFIX_START:
            return self.size_suffix
        if ch not in NUMBER_END:
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
        if ch in NUMBER_END:
            self.emit(TokenKind.INTEGER)
            return self.pop()
        self.string_state = self.unquoted_string
        return self.unquoted_string

    def datetime_tail(self) -> State | None:
        for expected in DATETIME_TAIL:
            ch = self.next()
            if expected == "0":
                if not (ch.isdigit() and ch.isascii()):
                    raise self.error(f"Expected digit in ISO8601 datetime, but found '{show_char(ch)}' instead.")
            elif ch != expected:
                raise self.error(f"Expected '{expected}' in ISO8601 datetime, but found '{show_char(ch)}' instead.")
        self.emit(TokenKind.DATETIME)
        return self.pop()

    def negative_number_start(self) -> State | None:
        ch = self.next()
        if not (ch.isdigit() and ch.isascii()):
            if ch == ".":
                raise self.error("Floats must start with a digit, not '.'.")
            raise self.error(f"Expected a digit but got '{show_char(ch)}'.")
        return self.negative_number

    def negative_number(self) -> State | None:
        self.skip_run(DIGIT_RUN)
        ch = self.next()
        if ch.isdigit() and ch.isascii():
            return self.negative_number
        if ch == ".":
            return self.float_start
        if ch != EOF and ch in SIZE_SUFFIX_START:
            return self.size_suffix
        self.backup()
        self.emit(TokenKind.INTEGER)
        return self.pop()

    def float_start(self) -> State | None:
        ch = self.next()
        if not (ch.isdigit() and ch.isascii()):
            raise self.error(f"Floats must have a digit after the '.', but got '{show_char(ch)}' instead.")
        return self.float_digits

    def float_digits(self) -> State | None:
        self.skip_run(DIGIT_RUN)
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

