"""Frame kinds are pinned; RingSpace (the fallbacks' arithmetic) is full exactly where the ring is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import limits
from appliance.fabric.frames import FrameKind, RingSpace, frame_bytes_max, record_bytes
from appliance.testing.ring_model import RingModel


def test_frame_kinds_are_append_only_wire_values() -> None:
    assert {kind.name: kind.value for kind in FrameKind} == {
        "HELLO": 1,
        "PING": 2,
        "PONG": 3,
        "INTEREST_ADD": 4,
        "INTEREST_REMOVE": 5,
        "MESSAGE": 6,
        "INTEREST_RESET": 7,
        "MONITOR_REQUEST": 8,
        "MONITOR_REPLY": 9,
        "INTEREST_ACK": 10,
        "INTEREST_SYNCED": 11,
    }


def test_records_are_padded_to_eight_bytes_after_an_eight_byte_header() -> None:
    assert [record_bytes(n) for n in (0, 1, 7, 8, 9, 128)] == [8, 16, 16, 16, 24, 136]


def test_a_default_ring_carries_a_maximum_nats_message() -> None:
    assert frame_bytes_max(limits.RING_BYTES) == limits.FRAME_BYTES_MAX
    assert frame_bytes_max(limits.RING_BYTES) >= limits.PAYLOAD_BYTES_MAX + limits.CONTROL_LINE_BYTES_MAX
    assert frame_bytes_max(limits.RING_BYTES_MIN) == limits.RING_BYTES_MIN // 4


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    capacity_log2=st.integers(12, 14),
    schedule=st.lists(st.tuples(st.booleans(), st.integers(0, 1024)), max_size=200),
)
def test_ring_space_accepts_and_frees_exactly_like_the_ring_model(
    capacity_log2: int, schedule: list[tuple[bool, int]]
) -> None:
    capacity = 1 << capacity_log2
    space = RingSpace(capacity)
    model = RingModel(capacity)
    in_flight: list[int] = []
    for is_push, length in schedule:
        if is_push:
            fits = space.fits(length)
            assert fits == model.push(1, bytes(length))
            if fits:
                space.push(length)
                in_flight.append(length)
        elif in_flight:
            space.pop(in_flight.pop(0))
            assert len(model.pop(1, 1 << 20)) == 1
        assert (space.head, space.tail) == (model.head, model.tail)
        assert space.fill == model.head - model.tail
