"""The simulated link under a hand-run scheduler: deterministic, and nothing runs behind our back."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.sim import SimLink, sim_link_pair


class ManualScheduler:
    """The simulator's view of a loop: callbacks run only when the test says so."""

    def __init__(self) -> None:
        self.queue: deque[Callable[[], object]] = deque()

    def call_soon(self, callback: Callable[[], object], /) -> object:
        self.queue.append(callback)
        return None

    def run_one(self) -> bool:
        if not self.queue:
            return False
        self.queue.popleft()()
        return True


class Recorder:
    def __init__(self, name: str, trace: list[str]) -> None:
        self.name = name
        self.trace = trace
        self.frames: list[Frame] = []
        self.resume: Callable[[], None] = lambda: None

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        self.frames.extend(frames)
        self.trace.append(f"{self.name} frames {len(frames)}")

    def on_writable(self, link: Link) -> None:
        self.trace.append(f"{self.name} writable")
        self.resume()

    def on_broken(self, link: Link, error: Exception) -> None:
        self.trace.append(f"{self.name} broken")


def run(seed: int) -> tuple[list[str], list[Frame], list[Frame]]:
    """A producer with random frame sizes against a consumer, steps interleaved by `seed`."""
    rng = random.Random(seed)
    scheduler = ManualScheduler()
    a, b = sim_link_pair(4096)
    trace: list[str] = []
    producer, consumer = Recorder("a", trace), Recorder("b", trace)
    wanted: list[Frame] = [(FrameKind.MESSAGE, bytes([i % 256]) * rng.randrange(0, 1024)) for i in range(200)]
    position = 0

    def pump() -> None:
        nonlocal position
        while position < len(wanted):
            if not a.try_send(*wanted[position]):
                trace.append(f"a refused at {position}")
                return
            position += 1

    producer.resume = pump
    a.start(scheduler, producer)
    b.start(scheduler, consumer)
    pump()
    for _ in range(100_000):
        if not scheduler.run_one():
            break
    return trace, wanted, consumer.frames


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_same_seed_gives_the_same_trace_and_every_frame_arrives(seed: int) -> None:
    trace, wanted, received = run(seed)
    assert received == wanted
    assert run(seed)[0] == trace
    assert sum(1 for line in trace if "refused" in line) == sum(1 for line in trace if "writable" in line)


def test_callbacks_wait_for_the_scheduler() -> None:
    scheduler = ManualScheduler()
    a, b = sim_link_pair(4096)
    trace: list[str] = []
    consumer = Recorder("b", trace)
    b.start(scheduler, consumer)
    a.start(scheduler, Recorder("a", trace))
    assert a.try_send(FrameKind.PING, b"one")
    assert a.try_send(FrameKind.PING, b"two")
    assert trace == [], "try_send never calls the peer's handler"
    while scheduler.run_one():
        pass
    assert consumer.frames == [(FrameKind.PING, b"one"), (FrameKind.PING, b"two")]
    assert trace == ["b frames 2"]


def test_a_broken_link_is_reported_through_the_scheduler() -> None:
    scheduler = ManualScheduler()
    a, b = sim_link_pair(4096)
    trace: list[str] = []
    a.start(scheduler, Recorder("a", trace))
    b.start(scheduler, Recorder("b", trace))
    assert isinstance(a, SimLink)
    a.break_link()
    assert trace == []
    while scheduler.run_one():
        pass
    assert sorted(trace) == ["a broken", "b broken"]
