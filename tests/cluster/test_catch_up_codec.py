"""The catch-up codec (cluster/catch_up_codec.py): round trips, and hostile bytes fail cleanly."""

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.cluster.catch_up_codec import (
    Part,
    Reply,
    Request,
    Status,
    decode_reply,
    decode_request,
    encode_msgs,
    encode_part,
    encode_request,
    encode_unavailable,
    msg_bytes,
)
from appliance.errors import CorruptData
from appliance.store.api import StoredMsg

U32 = st.integers(1, 2**32 - 1)
subjects = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
msgs = st.lists(
    st.tuples(st.integers(1, 50), subjects, st.binary(max_size=40), st.binary(max_size=80), st.integers(-2**63, 2**63 - 1)),
    max_size=12,
).map(lambda items: _ascending(items))


def _ascending(items: list[tuple[int, str, bytes, bytes, int]]) -> list[StoredMsg]:
    out, seq = [], 0
    for gap, subject, headers, payload, ts in items:
        seq += gap
        out.append(StoredMsg(seq, subject, headers, payload, ts))
    return out


@given(st.integers(1, 2**63), st.integers(0, 2**63 - 1), U32, U32, st.integers(0, 2**32 - 1))
def test_requests_round_trip(from_seq: int, span: int, max_msgs: int, max_bytes: int, offset: int) -> None:
    request = Request(from_seq, from_seq + span, max_msgs, max_bytes, offset)
    assert decode_request(encode_request(request)) == request


@given(msgs)
def test_batches_round_trip_and_their_size_is_known(batch: list[StoredMsg]) -> None:
    data = encode_msgs(batch)
    assert decode_reply(data) == Reply(Status.MSGS, msgs=tuple(batch))
    assert len(data) == 6 + sum(msg_bytes(m) for m in batch)


@given(st.integers(1, 2**64 - 1), subjects, st.binary(min_size=1, max_size=100), st.integers(0, 50), st.data())
def test_parts_round_trip(seq: int, subject: str, chunk: bytes, offset: int, data: st.DataObject) -> None:
    headers_len = data.draw(st.integers(0, offset + len(chunk)))
    part = Part(seq, -5, subject, headers_len, offset + len(chunk) - headers_len, offset, chunk)
    assert decode_reply(encode_part(part)) == Reply(Status.PART, part=part)
    assert decode_reply(encode_unavailable()) == Reply(Status.UNAVAILABLE)


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_garbage_is_corrupt_data_or_a_valid_reply_never_a_crash(data: bytes) -> None:
    for decode in (decode_reply, decode_request):
        try:
            decode(data)
        except CorruptData:
            pass


@settings(max_examples=300)
@given(msgs, st.data())
def test_damaged_batches_fail_cleanly(batch: list[StoredMsg], data: st.DataObject) -> None:
    encoded = bytearray(encode_msgs(batch))
    cut = data.draw(st.integers(0, len(encoded)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(encoded) - 1), st.integers(0, 255)), max_size=4))
    for pos, value in flips:
        encoded[pos] = value
    for damaged in (bytes(encoded), bytes(encoded[:cut]), bytes(encoded) + b"\x00"):
        try:
            reply = decode_reply(damaged)
        except CorruptData:
            continue
        seqs = [m.seq for m in reply.msgs]
        assert seqs == sorted(set(seqs))  # whatever decodes is still an ascending batch


def test_inconsistent_requests_are_refused() -> None:
    good = encode_request(Request(5, 9, 10, 100))
    for bad in (good[:-1], good + b"x", b"\x02" + good[1:], encode_request(Request(5, 9, 10, 100))[:1] + b"\x00" * 8 + good[9:]):
        try:
            decode_request(bad)
        except CorruptData:
            continue
        raise AssertionError(f"{bad!r} decoded")
