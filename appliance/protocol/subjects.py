"""NATS subjects: validation and wildcard matching, on bytes (the wire form).

A subject is tokens separated by `.`; tokens are non-empty and contain no whitespace. `*` matches
exactly one token and `>` one or more trailing tokens; both count only as whole tokens (`foo*` is a
literal). Publish subjects must be literal.
"""

from __future__ import annotations

from appliance import limits

_WHITESPACE = frozenset(b" \t\r\n\f")


def _tokens_ok(subject: bytes) -> bool:
    if not subject or len(subject) > limits.CONTROL_LINE_BYTES_MAX:
        return False
    for byte in _WHITESPACE:
        if byte in subject:
            return False
    if subject[0] == 0x2E or subject[-1] == 0x2E or b".." in subject:  # empty token
        return False
    return subject.count(b".") < limits.SUBJECT_TOKENS_MAX


def is_valid_subject(subject: bytes) -> bool:
    """A subscription subject: wildcards allowed, `>` only as the last token."""
    if not _tokens_ok(subject):
        return False
    if b">" in subject:
        tokens = subject.split(b".")
        for token in tokens[:-1]:
            if token == b">":
                return False
    return True


def is_literal(subject: bytes) -> bool:
    """True if no token is a wildcard (so the subject may be published to)."""
    if b"*" not in subject and b">" not in subject:
        return True
    return all(token != b"*" and token != b">" for token in subject.split(b"."))


def is_valid_publish_subject(subject: bytes) -> bool:
    return _tokens_ok(subject) and is_literal(subject)


def match_tokens(pattern: list[bytes], tokens: list[bytes]) -> bool:
    """Does a subject (tokens) match a pattern (tokens, wildcards allowed)?"""
    last = len(pattern) - 1
    for i, ptoken in enumerate(pattern):
        if ptoken == b">" and i == last:
            return len(tokens) > i
        if i >= len(tokens):
            return False
        if ptoken != b"*" and ptoken != tokens[i]:
            return False
    return len(tokens) == len(pattern)


def subject_matches(pattern: bytes, subject: bytes) -> bool:
    if pattern == subject:
        return True
    return match_tokens(pattern.split(b"."), subject.split(b"."))


def subsets_overlap(a: bytes, b: bytes) -> bool:
    """Can some literal subject match both patterns?"""
    ta, tb = a.split(b"."), b.split(b".")
    for i in range(max(len(ta), len(tb))):
        if i >= len(ta) or i >= len(tb):
            shorter = ta if len(ta) < len(tb) else tb
            return bool(shorter) and shorter[-1] == b">"
        x, y = ta[i], tb[i]
        if x == b">" or y == b">":
            return True
        if x != y and x != b"*" and y != b"*":
            return False
    return True


def pattern_covers(pattern: list[bytes], subject: list[bytes]) -> bool:
    """Does `pattern` match every subject that `subject` (which may have wildcards) matches?"""
    last = len(pattern) - 1
    for i, ptoken in enumerate(pattern):
        if ptoken == b">" and i == last:
            return len(subject) > i
        if i >= len(subject):
            return False
        stoken = subject[i]
        if ptoken == b"*":
            if stoken == b">":
                return False
        elif ptoken != stoken:
            return False
    return len(subject) == len(pattern)
