"""native/store.c and its Python twins agree on every input (differential property tests)."""

from __future__ import annotations

import gc
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import native
from appliance.store import records, segment, speedups
from appliance.store.api import StoredMsg, file_msg_size

msgs_strategy = st.lists(
    st.tuples(st.text(max_size=20), st.binary(max_size=40), st.binary(max_size=200), st.integers(-(2**63), 2**63 - 1)),
    max_size=30,
)

needs_native = pytest.mark.skipif(not speedups.ENABLED, reason="native store speedups not built / disabled")


def test_native_is_used_when_the_extension_is() -> None:
    assert speedups.ENABLED == native.ENABLED


@needs_native
@settings(max_examples=150, deadline=None)
@given(msgs_strategy, st.integers(1, 2**40), st.integers(0, 2**32))
def test_encode_msgs_matches_the_twin(msgs: list[tuple[str, bytes, bytes, int]], first_seq: int, base: int) -> None:
    assert speedups.encode_msgs(msgs, first_seq, base) == speedups.encode_msgs_py(msgs, first_seq, base)
    buffer, _, _, _ = speedups.encode_msgs(msgs, first_seq, base)
    expected = b"".join(records.encode_msg(first_seq + i, s.encode(), h, p, t) for i, (s, h, p, t) in enumerate(msgs))
    assert buffer == expected


@needs_native
@settings(max_examples=150, deadline=None)
@given(msgs_strategy, st.binary(max_size=64), st.integers(0, 3000))
def test_scan_frames_and_block_msgs_match_the_twins(
    msgs: list[tuple[str, bytes, bytes, int]], garbage: bytes, cut: int
) -> None:
    buffer, _, _, _ = speedups.encode_msgs_py(msgs, 1, 0)
    damaged = buffer[:cut] + garbage
    assert speedups.scan_frames(damaged, 0) == records.scan_frames(damaged, 0)
    for block_raw_bytes in (1, 100, 4096):
        assert speedups.plan_blocks(damaged, 0, block_raw_bytes) == segment.plan_blocks(damaged, 0, block_raw_bytes)
    for check in (True, False):
        assert speedups.replay_frames(damaged, 0, check) == speedups.replay_frames_py(damaged, 0, check)
    replayed, _ = speedups.replay_frames(buffer, 0, True)
    assert [r[6] for r in replayed] == [file_msg_size(s, h, p) for s, h, p, _ in msgs]
    for start in (1, 3, 10**6):
        assert speedups.block_msgs(buffer, start, StoredMsg) == speedups.block_msgs_py(buffer, start, StoredMsg)
    for seq in (1, len(msgs), len(msgs) + 1):
        assert speedups.find_msg(buffer, seq) == speedups.find_msg_py(buffer, seq)
    index = speedups.msg_index(buffer)
    assert index == speedups.msg_index_py(buffer)
    for seq in (0, 1, len(msgs) // 2, len(msgs), len(msgs) + 1):
        offset = speedups.index_find(index, seq)
        assert offset == speedups.index_find_py(index, seq) == speedups.find_msg_py(buffer, seq)
        if offset >= 0:
            assert speedups.msg_at(buffer, offset, StoredMsg) == speedups.msg_at_py(buffer, offset, StoredMsg)
            assert speedups.msg_at(buffer, offset, StoredMsg, True) == speedups.msg_at(buffer, offset, StoredMsg)
            assert speedups.msg_at(buffer, offset, StoredMsg).seq == seq



@needs_native
@settings(max_examples=150, deadline=None)
@given(msgs_strategy, st.sets(st.integers(0, 29)), st.binary(max_size=64), st.integers(0, 3000), st.integers(0, 40))
def test_msg_columns_match_the_twin_and_the_records(
    msgs: list[tuple[str, bytes, bytes, int]], deletes_after: set[int], garbage: bytes, cut: int, start: int
) -> None:
    """Columns of MSG records among removal records, on whole, cut and garbage-tailed buffers (crc
    checked or not), from any start: native == twin, and equal to decoding record by record."""
    parts = []
    for k, (subject, headers, payload, ts) in enumerate(msgs):
        parts.append(records.encode_msg(k + 1, subject.encode(), headers, payload, ts))
        if k in deletes_after:
            parts.append(records.encode_delete([(k + 1, k + 1)], ts))
    buffer = b"".join(parts)
    for damaged in (buffer, buffer[:cut] + garbage):
        for check in (True, False):
            at = min(start, len(damaged))
            assert speedups.msg_columns(damaged, at, check) == speedups.msg_columns_py(damaged, at, check)
    seqs, stamps, subject_offsets, subjects, payload_offsets, payloads, spans, others, stop = \
        speedups.msg_columns(buffer, 0, True)
    assert stop == len(buffer)
    decoded, offset = [], 0
    while offset < len(buffer):
        decoded.append(records.decode_at(buffer, offset, check=True))
        offset = decoded[-1].end
    msg_records = [r for r in decoded if r.kind == records.Kind.MSG]
    assert array("q", seqs).tolist() == [r.seq for r in msg_records]
    assert array("q", stamps).tolist() == [r.timestamp_ns for r in msg_records]
    sub_at, pay_at = array("i", subject_offsets).tolist(), array("i", payload_offsets).tolist()
    assert [subjects[a:b].decode() for a, b in zip(sub_at, sub_at[1:])] == [r.subject for r in msg_records]
    assert [payloads[a:b] for a, b in zip(pay_at, pay_at[1:])] == [r.payload for r in msg_records]
    triples = array("q", spans).tolist()
    assert [(triples[i], buffer[triples[i + 1]:triples[i + 1] + triples[i + 2]]) for i in range(0, len(triples), 3)] == \
        [(row, r.headers) for row, r in enumerate(msg_records) if r.headers]
    assert array("q", others).tolist() == [r.offset for r in decoded if r.kind != records.Kind.MSG]


def test_msg_columns_stop_at_a_flipped_byte_only_when_checking() -> None:
    buffer = records.encode_msg(1, b"a", b"", b"xyz", 5) + records.encode_msg(2, b"b", b"", b"xyz", 6)
    flipped = bytearray(buffer)
    flipped[-2] ^= 0x01  # inside the second payload: lengths hold, the crc does not
    for fn in (speedups.msg_columns, speedups.msg_columns_py):
        assert fn(bytes(flipped), 0, False)[-1] == len(buffer)
        assert fn(bytes(flipped), 0, True)[-1] == len(buffer) // 2
        with pytest.raises(ValueError):
            fn(buffer, len(buffer) + 1, False)

@needs_native
def test_block_msgs_refuses_a_malformed_block() -> None:
    buffer, _, _, _ = speedups.encode_msgs_py([("a", b"", b"x", 1)], 1, 0)
    with pytest.raises(ValueError):
        speedups.block_msgs(buffer[:-1], 1, StoredMsg)
    with pytest.raises(ValueError):
        speedups.block_msgs_py(buffer[:-1], 1, StoredMsg)


@needs_native
def test_msg_at_refuses_an_offset_without_a_message() -> None:
    buffer, _, _, _ = speedups.encode_msgs_py([("a", b"", b"x", 1), ("b", b"", b"y", 2)], 1, 0)
    buffer += records.encode_delete([(1, 1)])
    last = len(buffer) - len(records.encode_delete([(1, 1)]))
    for fn in (speedups.msg_at, speedups.msg_at_py):
        for offset in (1, last, len(buffer), -1):
            with pytest.raises(ValueError):
                fn(buffer, offset, StoredMsg)
        damaged = bytearray(buffer)
        damaged[last - 1] ^= 1  # the second message's payload
        second = speedups.find_msg_py(buffer, 2)
        assert fn(bytes(damaged), second, StoredMsg).payload != b"y", "unchecked: served as it is"
        with pytest.raises(ValueError):
            fn(bytes(damaged), second, StoredMsg, True)


@needs_native
def test_messages_built_natively_stay_out_of_the_cyclic_gc() -> None:
    buffer, _, _, _ = speedups.encode_msgs_py([("a", b"h", b"x", 1)], 1, 0)
    (msg,) = speedups.block_msgs(buffer, 1, StoredMsg)
    assert msg == StoredMsg(1, "a", b"h", b"x", 1)
    assert not gc.is_tracked(msg)
    assert not gc.is_tracked(speedups.msg_at(buffer, 0, StoredMsg))
