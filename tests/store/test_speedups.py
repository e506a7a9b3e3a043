"""native/store.c and its Python twins agree on every input (differential property tests)."""

from __future__ import annotations

import gc

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
