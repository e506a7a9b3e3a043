"""The read plan (pure, no Spark): pushed filters narrow ranges, the server filter never drops a
message the plan accepts, and Direct Get replies parse back to their stored headers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from appliance.spark import directget, plan
from appliance.store.subjects import subject_matches

TOKENS = st.sampled_from(["a", "b", "ab", "c1"])
SUBJECTS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)


def test_ranges_from_comparisons() -> None:
    p = plan.Plan()
    for op, value in [("GreaterThan", 5), ("LessThanOrEqual", 9)]:
        narrowed = plan.with_filter(p, "seq", op, value)
        assert narrowed is not None
        p = narrowed
    assert (p.seq_lo, p.seq_hi, p.empty) == (6, 9, False)
    assert plan.with_filter(p, "seq", "LessThan", 6).empty  # type: ignore[union-attr]
    assert plan.with_filter(p, "seq", "In", [1, 2]) is None
    assert plan.with_filter(p, "data", "EqualTo", b"x") is None
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    timed = plan.with_filter(plan.Plan(), "time", "GreaterThan", t)
    assert timed is not None and timed.time_lo == plan.to_micros(t) + 1


def test_options() -> None:
    p = plan.from_options({"startseq": "3", "endseq": "7", "subject": "a.*", "starttime": "2026-01-01T00:00:00Z"})
    assert (p.seq_lo, p.seq_hi, p.subject_filter) == (3, 7, "a.*")
    assert p.time_lo == plan.to_micros(datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert plan.split_ranges(1, 10, size=4) == [(1, 4), (5, 8), (9, 10)]
    assert plan.split_ranges(1, 10, size=100, count=3) == [(1, 4), (5, 8), (9, 10)]
    assert plan.split_ranges(5, 4, size=4) == []


@given(prefix=st.text(alphabet="ab.c1*>", max_size=8), subject=SUBJECTS, option=st.sampled_from([">", "a.>", "*.b"]))
def test_the_server_filter_keeps_every_accepted_message(prefix: str, subject: str, option: str) -> None:
    p = plan.with_filter(plan.Plan(subject_filter=option), "subject", "StringStartsWith", prefix)
    assert p is not None
    if p.accepts(1, subject, 0):
        assert subject_matches(p.server_filter(), subject)


@given(eq=SUBJECTS, subject=SUBJECTS)
def test_equality(eq: str, subject: str) -> None:
    p = plan.with_filter(plan.Plan(), "subject", "EqualTo", eq)
    assert p is not None and p.accepts(1, subject, 0) == (subject == eq) and p.server_filter() == eq


@given(ns=st.integers(min_value=0, max_value=4_000_000_000 * 10**9))
def test_direct_get_times_round_trip(ns: int) -> None:
    text = directget.rfc3339_ns(ns)
    assert directget.rfc3339_micros(text) == ns // 1000
    assert datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=ns // 1000) is not None


def test_direct_get_reply_keeps_the_stored_headers() -> None:
    block = (b"NATS/1.0\r\nX-A: 1\r\nX-A: 2\r\nNats-Stream: user\r\nNats-Stream: S\r\nNats-Subject: a.b\r\n"
             b"Nats-Sequence: 7\r\nNats-Time-Stamp: 2026-01-01T00:00:00.5Z\r\nNats-Num-Pending: 3\r\n"
             b"Nats-Last-Sequence: 6\r\n\r\n")
    msg = directget.parse_message(block, b"payload")
    assert (msg.seq, msg.subject, msg.data) == (7, "a.b", b"payload")
    assert msg.headers == {"X-A": ["1", "2"], "Nats-Stream": ["user"]}
    assert msg.time_us == plan.to_micros(datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=timezone.utc))
