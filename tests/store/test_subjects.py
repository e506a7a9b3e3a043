"""Subject filter matching follows NATS wildcard rules (checked against a token-by-token oracle)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.store.subjects import is_literal, subject_matches

tokens = st.sampled_from(["a", "b", "orders", "$KV", "x1"])
subjects = st.lists(tokens, min_size=1, max_size=5).map(".".join)
filters = st.lists(st.sampled_from(["a", "b", "orders", "*", "$KV"]), min_size=1, max_size=5).flatmap(
    lambda head: st.sampled_from([head, head + [">"]])
).map(".".join)


def oracle(filter_subject: str, subject: str) -> bool:
    f, s = filter_subject.split("."), subject.split(".")
    if f[-1] == ">":
        return len(s) >= len(f) and all(a in ("*", b) for a, b in zip(f[:-1], s))
    return len(s) == len(f) and all(a in ("*", b) for a, b in zip(f, s))


@given(filters, subjects)
def test_matching_agrees_with_the_oracle(filter_subject: str, subject: str) -> None:
    assert subject_matches(filter_subject, subject) == oracle(filter_subject, subject)


def test_examples_from_the_nats_documentation() -> None:
    assert subject_matches("orders.*", "orders.new")
    assert not subject_matches("orders.*", "orders.new.eu")
    assert subject_matches("orders.>", "orders.new.eu")
    assert not subject_matches("orders.>", "orders")
    assert subject_matches(">", "anything.at.all")
    assert subject_matches("*.new", "orders.new")
    assert is_literal("orders.new") and not is_literal("orders.*") and is_literal("a*b.c")
