"""Subject filters for the store: NATS wildcard matching, pure and allocation-light.

A filter is a subject whose tokens may be `*` (exactly one token) or a final `>` (one or more
tokens). The protocol layer has its own validator; the store only needs matching.
"""

from __future__ import annotations

FULL_WILDCARD = ">"


def is_literal(filter_subject: str) -> bool:
    """True when the filter has no wildcard token (so it names exactly one subject)."""
    if "*" not in filter_subject and ">" not in filter_subject:
        return True
    return all(token not in ("*", ">") for token in filter_subject.split("."))


def matches_all(filter_subject: str) -> bool:
    return filter_subject in ("", FULL_WILDCARD)


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Does `subject` (a literal) match `filter_subject` (which may hold wildcards)?"""
    if matches_all(filter_subject):
        return True
    if filter_subject == subject:
        return True
    filter_tokens = filter_subject.split(".")
    tokens = subject.split(".")
    for index, filter_token in enumerate(filter_tokens):
        if filter_token == ">":
            return index == len(filter_tokens) - 1 and len(tokens) > index
        if index >= len(tokens):
            return False
        if filter_token != "*" and filter_token != tokens[index]:
            return False
    return len(tokens) == len(filter_tokens)
