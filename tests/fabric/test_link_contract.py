"""The Link contract, run against every implementation: ring (shared memory), socketpair, sim.

Synchronous steps follow one rule, which is all a non-started link asks of its user: flush the
other end before acting on this one (a ring and a sim link need nothing; a socketpair moves its
buffered bytes and credits).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import limits, native
from appliance.errors import BrokenError, ClosedError, LimitExceeded
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link, Payload
from appliance.fabric.mesh import attach_mesh, create_mesh
from appliance.fabric.sim import SimLink, sim_link_pair
from appliance.fabric.socketpair import SocketpairLink
from appliance.testing.ring_model import RingModel

TRANSPORTS = ["ring", "socketpair", "sim"]
DEADLINE_S = 20.0


@dataclass
class LinkPair:
    a: Link  # worker 0's end
    b: Link  # worker 1's end
    close: Callable[[], None]


def make_pair(transport: str, capacity: int) -> LinkPair:
    if transport == "sim":
        a, b = sim_link_pair(capacity)
        return LinkPair(a, b, lambda: None)
    if transport == "ring" and not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(2, transport="ring" if transport == "ring" else "socketpair", ring_bytes=capacity)
    worker0 = attach_mesh(mesh.spec_for_local(0))
    worker1 = attach_mesh(mesh.spec_for_local(1))

    def close() -> None:
        worker0.close()
        worker1.close()
        mesh.close()

    return LinkPair(worker0.links[1], worker1.links[0], close)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pair(transport: str) -> Iterator[LinkPair]:
    made = make_pair(transport, 4096)
    yield made
    made.close()


def send(pair: LinkPair, kind: int, payload: Payload) -> bool:
    pair.b.flush()
    return pair.a.try_send(kind, payload)


def receive(pair: LinkPair, frames_max: int = limits.LINK_BATCH_FRAMES_MAX) -> list[Frame]:
    """What b can read now, once a has pushed out what it buffered (more than a socket buffer
    takes goes in several rounds)."""
    while True:
        flushed = pair.a.flush()
        frames = pair.b.receive(frames_max)
        if frames or flushed:
            return frames


def receive_all(pair: LinkPair) -> list[Frame]:
    frames: list[Frame] = []
    while batch := receive(pair):
        frames.extend(batch)
    return frames


# --- synchronous contract ---------------------------------------------------------------------------


def test_every_accepted_frame_is_delivered_once_in_order_across_wrap_arounds(pair: LinkPair) -> None:
    sent: list[Frame] = []
    received: list[Frame] = []
    for i in range(400):
        frame = (1 + i % 6, bytes([i % 256]) * ((i * 37) % (pair.a.frame_bytes_max + 1)))
        while not send(pair, *frame):
            batch = receive(pair, 5)
            assert batch, "a link is full only while frames are in flight"
            received.extend(batch)
        sent.append(frame)
    received.extend(receive_all(pair))
    assert received == sent


def test_a_full_link_refuses_then_accepts_once_the_peer_reads(pair: LinkPair) -> None:
    model = RingModel(4096)
    accepted = 0
    while send(pair, FrameKind.MESSAGE, bytes(100)):
        assert model.push(FrameKind.MESSAGE, bytes(100))
        accepted += 1
    assert not model.push(FrameKind.MESSAGE, bytes(100))
    assert accepted == 4096 // 112
    assert not send(pair, FrameKind.MESSAGE, bytes(100)), "still full: nothing was read"
    assert len(receive(pair, 1)) == 1
    assert send(pair, FrameKind.MESSAGE, bytes(100))
    assert len(receive_all(pair)) == accepted


def test_the_maximum_frame_passes_and_a_larger_one_is_a_limit_error(pair: LinkPair) -> None:
    biggest = bytes(range(256)) * (pair.a.frame_bytes_max // 256)
    assert len(biggest) == pair.a.frame_bytes_max == 1024
    for _ in range(10):  # from many ring positions
        assert send(pair, FrameKind.MESSAGE, biggest)
        assert send(pair, FrameKind.PING, b"x" * 24)
        assert receive_all(pair) == [(FrameKind.MESSAGE, biggest), (FrameKind.PING, b"x" * 24)]
    with pytest.raises(LimitExceeded):
        pair.a.try_send(FrameKind.MESSAGE, bytes(pair.a.frame_bytes_max + 1))


def test_empty_payloads_and_every_kind_value_travel(pair: LinkPair) -> None:
    frames = [(1, b""), (2**32 - 1, b""), (7, b"\x00" * 9)]
    for frame in frames:
        assert send(pair, *frame)
    assert receive_all(pair) == frames


def test_a_batch_holds_at_most_frames_max_frames(pair: LinkPair) -> None:
    for i in range(20):
        assert send(pair, FrameKind.PING, bytes([i]))
    assert [len(receive(pair, 7)) for _ in range(4)] == [7, 7, 6, 0]


def test_incoming_waiting_tells_whether_frames_wait_to_be_taken(pair: LinkPair) -> None:
    assert not pair.b.incoming_waiting()
    assert send(pair, FrameKind.MESSAGE, b"x")
    pair.a.flush()
    if isinstance(pair.b, SocketpairLink):
        pair.b._read_socket()  # a started link reads its socket when the loop says it is readable
    assert pair.b.incoming_waiting()
    assert receive_all(pair) == [(FrameKind.MESSAGE, b"x")]
    assert not pair.b.incoming_waiting()


def test_both_directions_are_independent(pair: LinkPair) -> None:
    while send(pair, FrameKind.MESSAGE, bytes(500)):
        pass
    pair.a.flush()
    assert pair.b.try_send(FrameKind.PONG, b"reply"), "a full a→b does not block b→a"
    pair.b.flush()
    assert pair.a.receive() == [(FrameKind.PONG, b"reply")]


def test_payloads_may_be_any_buffer_and_are_copied(pair: LinkPair) -> None:
    payload = bytearray(b"mutable")
    assert send(pair, FrameKind.MESSAGE, payload)
    assert send(pair, FrameKind.MESSAGE, memoryview(b"--view--")[2:6])
    payload[:] = b"changed"
    assert receive_all(pair) == [(FrameKind.MESSAGE, b"mutable"), (FrameKind.MESSAGE, b"view")]


def test_a_closed_link_refuses_to_send_and_receive(pair: LinkPair) -> None:
    pair.a.close()
    with pytest.raises(ClosedError):
        pair.a.try_send(FrameKind.PING, b"")
    with pytest.raises(ClosedError):
        pair.a.receive()


def test_batches_are_bounded_in_bytes_but_a_large_frame_still_goes_alone(transport: str) -> None:
    capacity = 4 * limits.LINK_BATCH_BYTES_MAX  # frame max = LINK_BATCH_BYTES_MAX
    made = make_pair(transport, capacity)
    try:
        big = bytes(made.a.frame_bytes_max)
        assert len(big) == limits.LINK_BATCH_BYTES_MAX
        assert send(made, FrameKind.MESSAGE, b"small")
        assert send(made, FrameKind.MESSAGE, big)
        assert send(made, FrameKind.MESSAGE, big)
        assert [len(p) for _, p in receive(made)] == [5]
        assert [len(p) for _, p in receive(made)] == [len(big)]
        assert [len(p) for _, p in receive(made)] == [len(big)]
    finally:
        made.close()


schedule_steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 1024)),
        st.tuples(st.just("receive"), st.integers(1, 9)),
    ),
    max_size=80,
)


@pytest.mark.parametrize("transport_name", TRANSPORTS)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(steps=schedule_steps)
def test_every_link_accepts_refuses_and_delivers_exactly_like_the_ring_model(
    transport_name: str, steps: list[tuple[str, int]]
) -> None:
    made = make_pair(transport_name, 4096)
    model = RingModel(4096)
    try:
        for index, (op, value) in enumerate(steps):
            if op == "send":
                payload = bytes([index % 256]) * value
                assert send(made, 1 + index % 6, payload) == model.push(1 + index % 6, payload)
            else:
                assert receive(made, value) == model.pop(value, limits.LINK_BATCH_BYTES_MAX)
    finally:
        made.close()


# --- driven by an event loop ------------------------------------------------------------------------


@dataclass
class Collector:
    """A router stand-in: collects frames, resumes a paused producer on `on_writable`."""

    expected: int
    loop: asyncio.AbstractEventLoop
    frames: list[Frame] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    writable_calls: int = 0
    resume: Callable[[], None] = lambda: None
    broken: list[Exception] = field(default_factory=list)
    done: asyncio.Future[None] | None = None

    def __post_init__(self) -> None:
        self.done = self.loop.create_future()

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        self.frames.extend(frames)
        self.batch_sizes.append(len(frames))
        if len(self.frames) >= self.expected and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def on_writable(self, link: Link) -> None:
        self.writable_calls += 1
        self.resume()

    def on_broken(self, link: Link, error: Exception) -> None:
        self.broken.append(error)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_backpressure_pauses_the_producer_until_the_consumer_drains(transport: str, loop_name: str) -> None:
    made = make_pair(transport, 4096)
    loop = LOOPS[loop_name]()
    wanted = [(1 + i % 6, bytes([i % 256]) * (i % 700)) for i in range(3000)]
    consumer = Collector(expected=len(wanted), loop=loop)
    producer = Collector(expected=0, loop=loop)
    refusals = 0
    next_index = 0

    def pump() -> None:
        nonlocal next_index, refusals
        while next_index < len(wanted):
            if not made.a.try_send(*wanted[next_index]):
                refusals += 1
                return  # on_writable calls pump again
            next_index += 1

    producer.resume = pump
    try:
        made.a.start(loop, producer)
        made.b.start(loop, consumer)
        loop.call_soon(pump)
        assert consumer.done is not None
        loop.run_until_complete(asyncio.wait_for(consumer.done, DEADLINE_S))
        assert consumer.frames == wanted
        assert refusals >= 1, "the producer outran a 4 KiB link at least once"
        assert producer.writable_calls >= 1
        assert refusals == producer.writable_calls, "every refusal is followed by one on_writable"
        assert max(consumer.batch_sizes) <= limits.LINK_BATCH_FRAMES_MAX
    finally:
        made.a.close()
        made.b.close()
        loop.close()
        made.close()


def test_frames_sent_before_start_are_delivered_after_start(transport: str) -> None:
    made = make_pair(transport, 4096)
    loop = asyncio.new_event_loop()
    consumer = Collector(expected=3, loop=loop)
    try:
        for i in range(3):
            assert made.a.try_send(FrameKind.HELLO, bytes([i]))
        made.a.start(loop, Collector(expected=0, loop=loop))
        made.b.start(loop, consumer)
        assert consumer.done is not None
        loop.run_until_complete(asyncio.wait_for(consumer.done, DEADLINE_S))
        assert consumer.frames == [(FrameKind.HELLO, bytes([i])) for i in range(3)]
    finally:
        made.a.close()
        made.b.close()
        loop.close()
        made.close()


def test_a_handler_may_answer_on_the_same_link_from_on_frames(transport: str) -> None:
    made = make_pair(transport, 4096)
    loop = asyncio.new_event_loop()
    pongs = Collector(expected=50, loop=loop)

    class Ponger(Collector):
        def on_frames(self, link: Link, frames: list[Frame]) -> None:
            for kind, payload in frames:
                assert kind == FrameKind.PING
                assert link.try_send(FrameKind.PONG, payload)

    try:
        made.a.start(loop, pongs)
        made.b.start(loop, Ponger(expected=0, loop=loop))
        for i in range(50):
            assert made.a.try_send(FrameKind.PING, i.to_bytes(4, "big"))
        assert pongs.done is not None
        loop.run_until_complete(asyncio.wait_for(pongs.done, DEADLINE_S))
        assert pongs.frames == [(FrameKind.PONG, i.to_bytes(4, "big")) for i in range(50)]
    finally:
        made.a.close()
        made.b.close()
        loop.close()
        made.close()


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_handler_that_raises_loses_its_batch_only_and_the_link_keeps_draining(transport: str,
                                                                                loop_name: str) -> None:
    """A handler's exception (here a RecursionError, as deeply nested JSON raised in a JetStream API
    handler) stays in the link: nothing reaches the loop's exception handler, and frames sent later,
    once the reader had gone idle, still arrive (a ring whose drain died never slept, so its producer
    never rang again: the link was dead for good)."""
    made = make_pair(transport, 4096)
    loop = LOOPS[loop_name]()
    escaped: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: escaped.append(context))
    consumer = Collector(expected=3, loop=loop)
    raised: list[bytes] = []

    class Failing(Collector):
        def on_frames(self, link: Link, frames: list[Frame]) -> None:
            for frame in frames:
                if frame[1].startswith(b"boom"):
                    raised.append(frame[1])
                    raise RecursionError("maximum recursion depth exceeded (injected)")
                consumer.on_frames(link, [frame])

    async def until(condition: Callable[[], bool]) -> None:
        while not condition():
            await asyncio.sleep(0.001)

    try:
        made.a.start(loop, Collector(expected=0, loop=loop))
        made.b.start(loop, Failing(expected=0, loop=loop))
        for round_number in range(3):
            assert made.a.try_send(FrameKind.MESSAGE, b"boom %d" % round_number)
            loop.run_until_complete(asyncio.wait_for(until(lambda n=round_number: len(raised) > n), DEADLINE_S))
            for _ in range(20):  # the reader goes idle (a ring announces its sleep) before the next frame
                loop.run_until_complete(asyncio.sleep(0))
            assert made.a.try_send(FrameKind.MESSAGE, b"after %d" % round_number)
            loop.run_until_complete(asyncio.wait_for(until(lambda n=round_number: len(consumer.frames) > n),
                                                     DEADLINE_S))
        assert consumer.done is not None
        loop.run_until_complete(asyncio.wait_for(consumer.done, DEADLINE_S))
        assert consumer.frames == [(FrameKind.MESSAGE, b"after %d" % n) for n in range(3)]
        assert escaped == []
    finally:
        made.a.close()
        made.b.close()
        loop.close()
        made.close()


# --- a peer that goes away --------------------------------------------------------------------------


def test_a_socketpair_peer_that_dies_breaks_the_link_after_its_frames() -> None:
    mesh = create_mesh(2, transport="socketpair", ring_bytes=4096)
    worker0 = attach_mesh(mesh.spec_for_local(0))
    worker1 = attach_mesh(mesh.spec_for_local(1))
    mesh.close()  # the supervisor's copies: now worker 1 holds the only end
    loop = asyncio.new_event_loop()
    watcher = Collector(expected=10**9, loop=loop)
    try:
        link = worker0.links[1]
        assert worker1.links[0].try_send(FrameKind.PING, b"last words")
        assert worker1.links[0].flush()
        worker1.close()  # the process died
        link.start(loop, watcher)
        assert watcher.done is not None
        loop.run_until_complete(asyncio.wait_for(watcher.done, DEADLINE_S))
        assert watcher.frames == [(FrameKind.PING, b"last words")]
        assert len(watcher.broken) == 1
        assert isinstance(watcher.broken[0], BrokenError)
        with pytest.raises(BrokenError):
            link.try_send(FrameKind.PING, b"")
    finally:
        worker0.close()
        loop.close()


def test_a_broken_sim_link_breaks_both_ends() -> None:
    a, b = sim_link_pair(4096)
    assert a.try_send(FrameKind.PING, b"before")
    a.break_link()
    with pytest.raises(BrokenError):
        a.try_send(FrameKind.PING, b"after")
    assert b.receive() == [(FrameKind.PING, b"before")]
    with pytest.raises(BrokenError):
        b.receive()
    assert isinstance(b, SimLink)


def socketpair_ends() -> tuple[socket.socket, socket.socket, Callable[[], None]]:
    mesh = create_mesh(2, transport="socketpair", ring_bytes=4096)
    spec0, spec1 = mesh.spec_for_local(0), mesh.spec_for_local(1)
    end0 = socket.socket(fileno=spec0.peers[0].socket_fd)
    end1 = socket.socket(fileno=spec1.peers[0].socket_fd)

    def close() -> None:
        end0.close()
        end1.close()
        mesh.close()

    return end0, end1, close


def test_a_peer_restarted_on_the_same_socketpair_breaks_the_link_instead_of_confusing_it() -> None:
    end0, end1, close = socketpair_ends()
    try:
        survivor = SocketpairLink(end0, peer=1, capacity=4096)
        first_life = SocketpairLink(end1, peer=0, capacity=4096)
        assert first_life.try_send(FrameKind.PING, b"from the first life")
        assert first_life.flush()
        second_life = SocketpairLink(end1, peer=0, capacity=4096)  # same fd, fresh state
        assert second_life.try_send(FrameKind.PING, b"from the second life")
        assert second_life.flush()
        assert survivor.receive() == [(FrameKind.PING, b"from the first life")]
        with pytest.raises(BrokenError, match="out of step"):
            survivor.receive()
    finally:
        close()


def test_half_a_record_left_by_a_dead_peer_is_never_delivered_as_a_frame() -> None:
    end0, end1, close = socketpair_ends()
    try:
        survivor = SocketpairLink(end0, peer=1, capacity=4096)
        writer = SocketpairLink(end1, peer=0, capacity=4096)
        assert writer.try_send(FrameKind.MESSAGE, bytes(range(200)))
        whole = bytes(writer._tx_pending)
        end1.sendall(whole[: len(whole) // 2])  # the process died in the middle of a send
        restarted = SocketpairLink(end1, peer=0, capacity=4096)
        assert restarted.try_send(FrameKind.MESSAGE, b"\x00" * 300)
        assert restarted.flush()
        with pytest.raises(BrokenError):
            survivor.receive()
    finally:
        close()
