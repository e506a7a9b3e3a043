"""What a batch read asks for, pure: the reader's options plus the filters Spark pushed down,
reduced to a sequence range, a time range (microseconds, Spark's timestamp unit), a subject
condition, and the NATS filter that makes the server send only candidates.

Spark does not evaluate again a filter the reader accepted, so `Plan.accepts` checks every
accepted condition exactly on each message; the server-side filter and ranges only narrow what
crosses the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from appliance.store.subjects import matches_all, subject_matches

SEQ_MAX = (1 << 63) - 1
TIME_MIN_US = -(1 << 62)
TIME_MAX_US = 1 << 62
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

COMPARISONS = {"EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual"}


def to_micros(value: datetime) -> int:
    """A datetime as microseconds since the epoch (naive values are UTC, as Spark passes them)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_time(text: str) -> int:
    """An option's time (RFC 3339 / ISO 8601, or integer nanoseconds since the epoch) in microseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text) // 1000
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return to_micros(value)


@dataclass(frozen=True, slots=True)
class Plan:
    seq_lo: int = 1
    seq_hi: int = SEQ_MAX
    time_lo: int = TIME_MIN_US  # inclusive, microseconds
    time_hi: int = TIME_MAX_US  # inclusive
    subject_filter: str = ">"  # the `subject` option (NATS wildcards)
    subject_eq: str | None = None
    subject_prefixes: tuple[str, ...] = ()
    empty: bool = False

    def accepts(self, seq: int, subject: str, time_us: int) -> bool:
        if not self.seq_lo <= seq <= self.seq_hi or not self.time_lo <= time_us <= self.time_hi:
            return False
        if self.subject_eq is not None and subject != self.subject_eq:
            return False
        for prefix in self.subject_prefixes:
            if not subject.startswith(prefix):
                return False
        return matches_all(self.subject_filter) or subject_matches(self.subject_filter, subject)

    @property
    def checks_subject_or_time(self) -> bool:
        """Does accepts() look at more than the sequence (a subject or time bound)?"""
        return (
            self.has_time or self.subject_eq is not None or bool(self.subject_prefixes)
            or not matches_all(self.subject_filter)
        )

    @property
    def has_time(self) -> bool:
        return self.time_lo != TIME_MIN_US or self.time_hi != TIME_MAX_US

    def server_filter(self) -> str:
        """The NATS filter the server applies: every message it skips fails `accepts`."""
        if self.subject_eq is not None:
            return self.subject_eq  # accepts() also checks the option's filter
        if not matches_all(self.subject_filter):
            return self.subject_filter
        best = ">"
        for prefix in self.subject_prefixes:
            candidate = prefix_filter(prefix)
            if len(candidate) > len(best):
                best = candidate
        return best


def prefix_filter(prefix: str) -> str:
    """The narrowest NATS filter matching every subject that starts with `prefix`: `a.b.>` for
    `a.b.` or `a.b.c` (the last token may be partial), `>` when no whole token is known."""
    head, dot, _partial = prefix.rpartition(".")
    if not dot or not head:
        return ">"
    tokens = head.split(".")
    if any(not t or t in ("*", ">") or " " in t for t in tokens):
        return ">"
    return head + ".>"


def with_filter(plan: Plan, column: str, op: str, value: Any) -> Plan | None:
    """The plan narrowed by `column op value`, or None when we do not evaluate that filter
    (Spark then applies it after the read)."""
    if value is None:
        return None
    if column == "seq" and op in COMPARISONS and isinstance(value, int) and not isinstance(value, bool):
        lo, hi = _bounds(op, value)
        return _narrow_seq(plan, lo, hi)
    if column == "time" and op in COMPARISONS and isinstance(value, datetime):
        lo, hi = _bounds(op, to_micros(value))
        return _narrow_time(plan, lo, hi)
    if column == "subject" and isinstance(value, str):
        if op == "EqualTo":
            if plan.subject_eq is not None and plan.subject_eq != value:
                return replace(plan, empty=True)
            return replace(plan, subject_eq=value)
        if op == "StringStartsWith":
            return replace(plan, subject_prefixes=(*plan.subject_prefixes, value))
    return None


def _bounds(op: str, value: int) -> tuple[int, int]:
    if op == "EqualTo":
        return value, value
    if op == "GreaterThan":
        return value + 1, SEQ_MAX
    if op == "GreaterThanOrEqual":
        return value, SEQ_MAX
    if op == "LessThan":
        return -SEQ_MAX, value - 1
    return -SEQ_MAX, value  # LessThanOrEqual


def _narrow_seq(plan: Plan, lo: int, hi: int) -> Plan:
    lo, hi = max(plan.seq_lo, lo), min(plan.seq_hi, hi)
    return replace(plan, seq_lo=lo, seq_hi=hi, empty=plan.empty or lo > hi)


def _narrow_time(plan: Plan, lo: int, hi: int) -> Plan:
    lo, hi = max(plan.time_lo, lo), min(plan.time_hi, hi)
    return replace(plan, time_lo=lo, time_hi=hi, empty=plan.empty or lo > hi)


def from_options(options: dict[str, str]) -> Plan:
    """The plan of the reader's options (keys lower-cased, as Spark passes them)."""
    plan = Plan(subject_filter=options.get("subject", ">") or ">")
    if "startseq" in options:
        plan = _narrow_seq(plan, int(options["startseq"]), SEQ_MAX)
    if "endseq" in options:
        plan = _narrow_seq(plan, 1, int(options["endseq"]))
    if "starttime" in options:
        plan = _narrow_time(plan, parse_time(options["starttime"]), TIME_MAX_US)
    if "endtime" in options:
        plan = _narrow_time(plan, TIME_MIN_US, parse_time(options["endtime"]))
    return plan


def split_ranges(lo: int, hi: int, *, size: int, count: int = 0) -> list[tuple[int, int]]:
    """[lo, hi] cut into ranges of `size` sequences, or into `count` near-equal ranges when given."""
    if lo > hi:
        return []
    total = hi - lo + 1
    if count > 0:
        size = max(-(-total // count), 1)
    size = max(size, 1)
    return [(start, min(start + size - 1, hi)) for start in range(lo, hi + 1, size)]


def narrow_all(plan: Plan, filters: Iterable[tuple[str, str, Any]]) -> tuple[Plan, list[int]]:
    """Apply (column, op, value) filters; the indexes of those not accepted."""
    rejected = []
    for index, (column, op, value) in enumerate(filters):
        narrowed = with_filter(plan, column, op, value)
        if narrowed is None:
            rejected.append(index)
        else:
            plan = narrowed
    return plan, rejected
