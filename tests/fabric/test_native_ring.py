"""native/ring.c against the pure-Python reference model: same schedule, same bytes, same answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import native
from appliance.testing.ring_model import RingModel

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="appliance._native not in use")
speedups = native.speedups
HEADER_BYTES = 256


def fresh_ring(capacity: int, *, offset: int = 0) -> bytearray:
    assert speedups is not None
    memory = bytearray(offset + speedups.ring_region_bytes(capacity))
    speedups.ring_init(memory, offset, capacity, capacity // 4)
    return memory


def pop(memory: bytearray, frames_max: int = 256, bytes_max: int = 1 << 20) -> list[tuple[int, bytes]]:
    assert speedups is not None
    out: list[tuple[int, bytes]] = []
    count, _wake = speedups.ring_pop(memory, 0, out, frames_max, bytes_max)
    assert count == len(out)
    return out


push_op = st.tuples(st.just("push"), st.integers(1, 2**32 - 1), st.integers(0, 1024))
pop_op = st.tuples(st.just("pop"), st.integers(1, 8), st.integers(1, 2048))
schedules = st.lists(st.one_of(push_op, push_op, pop_op), max_size=120)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(capacity_log2=st.integers(6, 12), schedule=schedules)
def test_c_ring_and_model_agree_on_every_schedule(capacity_log2: int, schedule: list[tuple[str, int, int]]) -> None:
    assert speedups is not None
    capacity = 1 << capacity_log2
    memory = fresh_ring(capacity)
    model = RingModel(capacity)
    for step, (op, a, b) in enumerate(schedule):
        if op == "push":
            length = min(b, capacity // 4)
            payload = bytes((step + i) % 251 for i in range(length))
            assert (speedups.ring_push(memory, 0, a, payload) != 0) == model.push(a, payload)
        else:
            assert pop(memory, a, b) == model.pop(a, b)
        assert speedups.ring_counters(memory, 0) == (model.head, model.tail)
        assert memory[HEADER_BYTES:] == model.data


@settings(max_examples=100, deadline=None, derandomize=True)
@given(sizes=st.lists(st.integers(0, 1024), min_size=1, max_size=300))
def test_frames_come_out_in_order_across_wrap_arounds(sizes: list[int]) -> None:
    memory = fresh_ring(4096)
    assert speedups is not None
    expected = [(i + 1, bytes([i % 256]) * size) for i, size in enumerate(sizes)]
    received: list[tuple[int, bytes]] = []
    pending = list(expected)
    while pending:
        while pending and speedups.ring_push(memory, 0, *pending[0]):
            pending.pop(0)
        received.extend(pop(memory, frames_max=3))
    received.extend(pop(memory))
    assert received == expected
    head, tail = speedups.ring_counters(memory, 0)
    assert head == tail
    assert head > 4096 or sum(8 + (s + 7) // 8 * 8 for s in sizes) <= 4096, "the schedule wrapped"


def test_a_full_ring_refuses_without_writing_anything() -> None:
    assert speedups is not None
    memory = fresh_ring(256)
    assert speedups.ring_push(memory, 0, 1, bytes(56))  # 64-byte records: four fill it
    assert speedups.ring_push(memory, 0, 1, bytes(56))
    assert speedups.ring_push(memory, 0, 1, bytes(56))
    assert speedups.ring_push(memory, 0, 1, bytes(56))
    before = bytes(memory)
    assert speedups.ring_push(memory, 0, 2, b"") == 0
    assert bytes(memory) == before
    assert len(pop(memory, frames_max=1)) == 1
    assert speedups.ring_push(memory, 0, 2, bytes(56)) != 0


def test_the_maximum_frame_is_a_quarter_of_the_ring_and_fits_after_any_wrap() -> None:
    assert speedups is not None
    capacity = 4096
    biggest = bytes(range(256)) * (capacity // 4 // 256)
    for lead in range(0, capacity, 8 * 37):
        memory = fresh_ring(capacity)
        if lead:
            assert speedups.ring_push(memory, 0, 1, bytes(min(lead, capacity // 4)))
            pop(memory)
        assert speedups.ring_push(memory, 0, 9, biggest)
        assert pop(memory) == [(9, biggest)]
    memory = fresh_ring(capacity)
    with pytest.raises(ValueError, match="larger than the ring's maximum"):
        speedups.ring_push(memory, 0, 1, bytes(capacity // 4 + 1))


def test_kind_zero_is_reserved_for_the_wrap_marker() -> None:
    assert speedups is not None
    with pytest.raises(ValueError, match="reserved"):
        speedups.ring_push(fresh_ring(256), 0, 0, b"x")


def test_a_batch_stops_at_frames_max_and_before_bytes_max_but_always_takes_one() -> None:
    assert speedups is not None
    memory = fresh_ring(4096)
    for i in range(6):
        assert speedups.ring_push(memory, 0, i + 1, bytes(100))
    assert [kind for kind, _ in pop(memory, frames_max=2)] == [1, 2]
    assert [kind for kind, _ in pop(memory, bytes_max=250)] == [3, 4]
    assert [kind for kind, _ in pop(memory, bytes_max=10)] == [5]
    assert [kind for kind, _ in pop(memory)] == [6]
    assert pop(memory) == []


def test_the_doorbell_is_rung_only_when_the_reader_sleeps_and_once_per_sleep() -> None:
    assert speedups is not None
    memory = fresh_ring(4096)
    assert speedups.ring_push(memory, 0, 1, b"a") == 1  # reader awake: no doorbell
    assert speedups.ring_reader_sleep(memory, 0) is False  # data there: do not sleep
    pop(memory)
    assert speedups.ring_reader_sleep(memory, 0) is True
    assert speedups.ring_push(memory, 0, 1, b"b") == 2  # ring it
    assert speedups.ring_push(memory, 0, 1, b"c") == 1  # already rung for this sleep


def test_a_waiting_writer_is_woken_once_enough_space_is_freed() -> None:
    assert speedups is not None
    memory = fresh_ring(512)
    for _ in range(8):
        assert speedups.ring_push(memory, 0, 1, bytes(56))  # 64-byte records fill it
    assert speedups.ring_push(memory, 0, 1, bytes(120)) == 0  # needs 128 bytes
    assert speedups.ring_writer_wait(memory, 0, 120) is True
    out: list[tuple[int, bytes]] = []
    assert speedups.ring_pop(memory, 0, out, 1, 1 << 20) == (1, False)  # 64 free: not enough
    assert speedups.ring_pop(memory, 0, out, 1, 1 << 20) == (1, True)  # 128 free: wake
    assert speedups.ring_pop(memory, 0, out, 1, 1 << 20) == (1, False)  # woken once
    assert speedups.ring_push(memory, 0, 1, bytes(120)) != 0


def test_writer_wait_reports_space_that_is_already_there() -> None:
    assert speedups is not None
    memory = fresh_ring(256)
    assert speedups.ring_writer_wait(memory, 0, 56) is False


def test_push_many_stops_at_the_first_frame_that_does_not_fit() -> None:
    assert speedups is not None
    memory = fresh_ring(256)
    frames = [(i + 1, bytes(56)) for i in range(6)]
    assert speedups.ring_push_many(memory, 0, frames, 0) == (4, False)
    pop(memory, frames_max=2)
    assert speedups.ring_push_many(memory, 0, frames, 4) == (6, False)
    assert [kind for kind, _ in pop(memory)] == [3, 4, 5, 6]


def test_rings_sit_at_any_aligned_offset_and_are_validated() -> None:
    assert speedups is not None
    memory = fresh_ring(128, offset=64)
    assert speedups.ring_check(memory, 64) == (128, 32)
    with pytest.raises(ValueError, match="magic"):
        speedups.ring_check(memory, 0)
    with pytest.raises(ValueError, match="aligned"):
        speedups.ring_check(memory, 4)
    with pytest.raises(ValueError, match="beyond"):
        speedups.ring_check(memory, len(memory))
    with pytest.raises(ValueError, match="too small"):
        speedups.ring_check(memory[: 64 + 256 + 64], 64)
    with pytest.raises(ValueError, match="power of two"):
        speedups.ring_init(bytearray(1024), 0, 100, 25)
    with pytest.raises(ValueError, match="frame_bytes_max"):
        speedups.ring_init(bytearray(1024), 0, 256, 65)
    with pytest.raises(BufferError):
        speedups.ring_check(b"read-only bytes are refused" * 20, 0)


def test_a_scribbled_record_is_reported_not_delivered() -> None:
    assert speedups is not None
    memory = fresh_ring(256)
    assert speedups.ring_push(memory, 0, 1, b"abc")
    memory[HEADER_BYTES : HEADER_BYTES + 4] = (10_000).to_bytes(4, "little")
    with pytest.raises(RuntimeError, match="corrupt"):
        pop(memory)
