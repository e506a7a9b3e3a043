"""Direct get replies build their header block in one bytes format (direct.direct_headers) and
their time stamps per second (direct.time_text): the same bytes as the general header builders
(wire.append_headers, wire.rfc3339) for any message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.jetstream.direct import direct_headers, time_text
from appliance.jetstream.wire import append_headers, build_headers, rfc3339
from appliance.store.api import StoredMsg

TOKENS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzé0123456789-_", min_size=1, max_size=8)
SUBJECTS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)
STAMPS = st.one_of(st.just(0), st.integers(min_value=1, max_value=4_102_444_800 * 10**9),
                   st.integers(min_value=1, max_value=4_102_444_800).map(lambda s: s * 10**9))
STORED_HEADERS = st.one_of(
    st.just(b""),
    st.lists(st.tuples(st.sampled_from(["Nats-Msg-Id", "KV-Operation", "X"]), TOKENS), min_size=1, max_size=3)
    .map(build_headers),
)


@given(STAMPS)
def test_time_text_is_rfc3339(ns: int) -> None:
    assert time_text(ns) == rfc3339(ns).encode()


@given(TOKENS, SUBJECTS, st.integers(min_value=1, max_value=2**63 - 1), STORED_HEADERS, STAMPS,
       st.booleans(), st.integers(min_value=0, max_value=10**9))
def test_header_block_is_the_general_builders_block(stream: str, subject: str, seq: int, stored: bytes,
                                                    ns: int, batch: bool, pending: int) -> None:
    msg = StoredMsg(seq, subject, stored, b"payload", ns)
    pairs = [("Nats-Stream", stream), ("Nats-Subject", subject), ("Nats-Sequence", str(seq)),
             ("Nats-Time-Stamp", rfc3339(ns))]
    extra = b""
    if batch:
        pairs += [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(seq - 1))]
        extra = b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n" % (pending, seq - 1)
    assert direct_headers(stream, msg, extra) == append_headers(stored, pairs)


def test_a_stored_header_block_comes_first_and_the_stream_headers_follow() -> None:
    stored = build_headers([("KV-Operation", "PURGE")])
    msg = StoredMsg(7, "$KV.b.k", stored, b"", 1_700_000_000_500_000_000)
    assert direct_headers("KV_b", msg) == (
        b"NATS/1.0\r\nKV-Operation: PURGE\r\nNats-Stream: KV_b\r\nNats-Subject: $KV.b.k\r\n"
        b"Nats-Sequence: 7\r\nNats-Time-Stamp: 2023-11-14T22:13:20.5Z\r\n\r\n"
    )
