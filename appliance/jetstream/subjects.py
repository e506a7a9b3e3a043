"""Subject and name rules JetStream needs: validity, filter matching, overlap between filters."""

from __future__ import annotations

from functools import lru_cache

NAME_FORBIDDEN = frozenset(".*> \t\r\n\f/\\")


def is_valid_name(name: str) -> bool:
    """Stream/consumer names: non-empty, no `.`, `*`, `>`, whitespace or path separators."""
    return bool(name) and not any(ch in NAME_FORBIDDEN for ch in name)


def is_valid_subject(subject: str) -> bool:
    if not subject or any(ch in subject for ch in " \t\r\n"):
        return False
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token:
            return False
        if len(token) > 1 and ("*" in token or ">" in token):
            continue  # nats-server treats such tokens as literals
        if token == ">" and index != len(tokens) - 1:
            return False
    return True


def is_literal(subject: str) -> bool:
    return "*" not in subject.split(".") and ">" not in subject.split(".")


@lru_cache(maxsize=4096)
def _tokens(subject: str) -> tuple[str, ...]:
    return tuple(subject.split("."))


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Does the literal `subject` match `filter_subject` (which may hold wildcards)?"""
    if filter_subject == ">" or filter_subject == subject:
        return True
    pattern = _tokens(filter_subject)
    tokens = _tokens(subject)
    for index, part in enumerate(pattern):
        if part == ">":
            return len(tokens) > index
        if index >= len(tokens):
            return False
        if part != "*" and part != tokens[index]:
            return False
    return len(tokens) == len(pattern)


def subjects_overlap(first: str, second: str) -> bool:
    """Could some literal subject match both filters?"""
    a, b = _tokens(first), _tokens(second)
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b):
            return False
        x, y = a[index], b[index]
        if x == ">" or y == ">":
            return True
        if x != "*" and y != "*" and x != y:
            return False
    return True


def subject_is_subset(subset: str, of: str) -> bool:
    """Is every subject matched by `subset` also matched by `of`?"""
    a, b = _tokens(subset), _tokens(of)
    for index, part in enumerate(b):
        if part == ">":
            return len(a) > index
        if index >= len(a):
            return False
        if not part or not a[index] or a[index] == ">":  # an empty token is never a subset
            return False
        if part != "*" and (a[index] == "*" or a[index] != part):
            return False
    return len(a) == len(b)
