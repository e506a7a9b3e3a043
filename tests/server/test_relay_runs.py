"""append_relayed_msgs: a run of deliveries JetStream relayed from a sibling worker becomes the
MSG/HMSG lines a client would get from one server — on the stream subject, with the ack subject
(split at the reply's last '@') as reply. Native and Python twins agree byte for byte, malformed
input included (nothing written, ValueError)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import limits
from appliance.jetstream.relay import relay_deliverer
from appliance.protocol import wire
from appliance.server.links import (
    LinkPeer,
    LocalFabric,
    append_record_py,
    append_relayed_msgs,
    append_relayed_msgs_py,
    decode_records_py,
    record_subject,
)
from appliance.server.sublist import Subscription

IMPLEMENTATIONS = [append_relayed_msgs_py, append_relayed_msgs]
Delivery = tuple[bytes, bytes, "bytes | None", bytes]  # ack, stream subject, header block, payload

acks = st.sampled_from([b"", b"$JS.ACK.S.C.1.1.1.1.0", b"$JS.ACK.S@x.C@y.1.2.3.4.5", b"@", b"a@b@"])
stream_subjects = st.sampled_from([b"orders.new", b"a", b"x.y.z"])
headers = st.sampled_from([b"", b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nK: v\r\n\r\n"])
deliveries = st.lists(st.tuples(acks, stream_subjects, st.one_of(st.none(), headers), st.binary(max_size=40)),
                      max_size=10)


def relayed_frame(items: list[Delivery], inbox: bytes = b"_INBOX.f") -> bytes:
    out = bytearray()
    for ack, subject, header, payload in items:
        data = payload if header is None else header + payload
        append_record_py(out, b"$G", b"$JSD." + inbox, ack + b"@" + subject, None,
                         -1 if header is None else len(header), data)
    return bytes(out)


def one_by_one(items: list[Delivery], tail: bytes, with_headers: bool) -> bytes:
    """What ClientConnection.deliver writes for each delivery (the relay's per-record path)."""
    out = bytearray(b"before")
    for ack, subject, header, payload in items:
        if header is not None and not with_headers:
            header = None
        data = payload if header is None else header + payload
        wire.append_msg(out, subject, tail, ack or None, -1 if header is None else len(header), data)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(items=deliveries, with_headers=st.booleans(), limit=st.integers(min_value=0, max_value=12),
       tail=st.sampled_from([b" 1 ", b" 42 "]))
def test_a_relayed_run_is_written_as_deliver_would_one_by_one(
        items: list[Delivery], with_headers: bool, limit: int, tail: bytes) -> None:
    payload = relayed_frame(items)
    taken = items[:limit]
    expected = one_by_one(taken, tail, with_headers)
    expected_bytes = sum(len(p) + (len(h) if h is not None and with_headers else 0) for _, _, h, p in taken)
    for implementation in IMPLEMENTATIONS:
        out = bytearray(b"before")
        result = implementation(out, payload, 0, len(payload), tail, with_headers, limit)
        assert result == (len(taken), len(relayed_frame(taken)), expected_bytes)
        assert bytes(out) == expected


def test_the_reply_splits_at_its_last_at_sign_so_an_ack_subject_may_hold_one() -> None:
    payload = relayed_frame([(b"$JS.ACK.S@1.C.1.2.3.4.0", b"orders.new", None, b"hi")])
    for implementation in IMPLEMENTATIONS:
        out = bytearray()
        assert implementation(out, payload, 0, len(payload), b" 5 ", True, 10) == (1, len(payload), 2)
        assert out == b"MSG orders.new 5 $JS.ACK.S@1.C.1.2.3.4.0 2\r\nhi\r\n"


def test_a_range_inside_a_frame_is_taken_from_its_start() -> None:
    first = relayed_frame([(b"a1", b"s", None, b"1")], inbox=b"x")
    second = relayed_frame([(b"a2", b"t", b"NATS/1.0\r\n\r\n", b"2"), (b"a3", b"t", None, b"3")])
    payload = first + second
    for implementation in IMPLEMENTATIONS:
        out = bytearray()
        result = implementation(out, payload, len(first), len(payload), b" 9 ", True, 5)
        assert result == (2, len(payload), 14)
        assert out == b"HMSG t 9 a2 12 13\r\nNATS/1.0\r\n\r\n2\r\nMSG t 9 a3 1\r\n3\r\n"


def malformed_frames() -> list[bytes]:
    no_at = bytearray()
    append_record_py(no_at, b"$G", b"$JSD.i", b"noreply", None, -1, b"x")
    no_reply = bytearray()
    append_record_py(no_reply, b"$G", b"$JSD.i", None, None, -1, b"x")
    no_subject = bytearray()
    append_record_py(no_subject, b"$G", b"$JSD.i", b"ack@", None, -1, b"x")
    good = relayed_frame([(b"ack", b"s", None, b"ok")])
    return [bytes(no_at), bytes(no_reply), bytes(no_subject), good + bytes(no_at), good[:-1], good + good[:7]]


@pytest.mark.parametrize("payload", malformed_frames())
def test_a_malformed_run_raises_and_writes_nothing(payload: bytes) -> None:
    for implementation in IMPLEMENTATIONS:
        out = bytearray(b"kept")
        with pytest.raises(ValueError):
            implementation(out, payload, 0, len(payload), b" 1 ", True, 100)
        assert out == b"kept"


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=80), start=st.integers(min_value=-2, max_value=90),
       end=st.integers(min_value=-2, max_value=90), limit=st.integers(min_value=0, max_value=4))
def test_twins_agree_on_arbitrary_bytes(garbage: bytes, start: int, end: int, limit: int) -> None:
    outcomes = []
    for implementation in IMPLEMENTATIONS:
        out = bytearray(b"k")
        try:
            outcomes.append((implementation(out, garbage, start, end, b" 1 ", True, limit), bytes(out)))
        except ValueError:
            outcomes.append(("ValueError", bytes(out)))
    assert outcomes[0] == outcomes[1]
    if outcomes[0][0] == "ValueError":
        assert outcomes[0][1] == b"k"


def test_record_subject_reads_a_runs_subject_and_refuses_a_cut_record() -> None:
    payload = relayed_frame([(b"a", b"s", None, b"x")], inbox=b"_INBOX.abc")
    assert record_subject(payload, 0) == b"$JSD._INBOX.abc" == decode_records_py(payload)[0][1]
    with pytest.raises(ValueError):
        record_subject(payload[:10], 0)
    with pytest.raises(ValueError):
        record_subject(payload[:20], 0)


# --- the sending worker: a pull batch bound once to a sibling's subscription --------------------


class RecordingLink:
    """A link that takes every frame."""

    def __init__(self) -> None:
        self.peer = 1
        self.frame_bytes_max = 1 << 20
        self.sent: list[tuple[int, bytes]] = []

    def try_send(self, kind: int, payload: bytes | bytearray) -> bool:
        self.sent.append((kind, bytes(payload)))
        return True

    def flush(self) -> bool:
        return True


class RecordingServer:
    def __init__(self) -> None:
        self.dirty: list[object] = []
        self.producer = None
        self.flushes_scheduled = 0

    def schedule_flush(self) -> None:
        self.flushes_scheduled += 1


def test_a_relayed_pull_batch_leaves_in_relay_sized_frames_and_the_rest_at_the_flush() -> None:
    server = RecordingServer()
    link = RecordingLink()
    peer = LinkPeer(cast(LocalFabric, SimpleNamespace(server=server)), cast(Any, link))
    sub = Subscription(peer, b"_INBOX.f", None, b"L1", "$G")
    deliver = relay_deliverer(sub, b"_INBOX.f")
    header = b"NATS/1.0\r\nK: v\r\n\r\n"
    count = 3 * limits.JS_RELAY_PIPELINE_BYTES // 200
    for n in range(count):
        with_header = header if n % 2 else None
        ack = b"$JS.ACK.S.C.1.%d.%d.0.0" % (n, n)
        assert deliver(b"orders.%d" % (n % 3), ack, with_header, b"p" * 150) == 1
    assert len(link.sent) >= 2, "frames left while the batch was being made"
    assert all(len(frame) <= limits.JS_RELAY_PIPELINE_BYTES + 300 for _, frame in link.sent)
    assert peer in server.dirty, "the rest leaves when the server flushes"
    assert server.flushes_scheduled == len(link.sent) + 1, "a flush asked for once per frame, not per message"
    peer.flush()  # the end of the turn
    records = [record for _, frame in link.sent for record in decode_records_py(frame)]
    assert [r[1] for r in records] == [b"$JSD._INBOX.f"] * count
    assert [r[2] for r in records] == [b"$JS.ACK.S.C.1.%d.%d.0.0@orders.%d" % (n, n, n % 3)
                                       for n in range(count)]
    assert [r[4] for r in records] == [header if n % 2 else None for n in range(count)]
    assert peer.msgs_out == count
    # what the receiving worker writes for a client of that inbox: the stream subjects and acks again
    out = bytearray()
    payload = b"".join(frame for _, frame in link.sent)
    assert append_relayed_msgs(out, payload, 0, len(payload), b" 1 ", True, count)[0] == count
    assert out.startswith(b"MSG orders.0 1 $JS.ACK.S.C.1.0.0.0.0 150\r\n" + b"p" * 150 + b"\r\n"
                          b"HMSG orders.1 1 $JS.ACK.S.C.1.1.1.0.0 %d 168\r\n" % len(header))
