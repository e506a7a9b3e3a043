"""What only the shared-memory RingLink has: batched sends, fill levels, one doorbell per sleep."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from appliance import native
from appliance.errors import ClosedError, CorruptData, LimitExceeded
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.mesh import WorkerMesh, attach_mesh, create_mesh, ring_offset
from appliance.fabric.ring import RingLink

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="appliance._native not in use")
DEADLINE_S = 20.0


@pytest.fixture
def workers() -> Iterator[tuple[WorkerMesh, WorkerMesh]]:
    mesh = create_mesh(2, transport="ring", ring_bytes=4096)
    pair = (attach_mesh(mesh.spec_for_local(0)), attach_mesh(mesh.spec_for_local(1)))
    yield pair
    for worker in pair:
        worker.close()
    mesh.close()


def ring_links(workers: tuple[WorkerMesh, WorkerMesh]) -> tuple[RingLink, RingLink]:
    a, b = workers[0].links[1], workers[1].links[0]
    assert isinstance(a, RingLink) and isinstance(b, RingLink)
    return a, b


def doorbell_count(fd: int) -> int:
    try:
        return os.eventfd_read(fd)
    except BlockingIOError:
        return 0


def test_try_send_many_sends_a_prefix_and_says_where_it_stopped(workers: tuple[WorkerMesh, WorkerMesh]) -> None:
    a, b = ring_links(workers)
    frames: list[Frame] = [(FrameKind.MESSAGE, bytes([i]) * 100) for i in range(50)]
    stopped = a.try_send_many(frames)
    assert stopped == 4096 // 112
    assert a.fill() == (stopped * 112, 0)
    assert b.fill() == (0, stopped * 112)
    assert b.receive() == frames[:stopped]
    assert a.try_send_many(frames, stopped) == len(frames)
    assert b.receive() == frames[stopped:]
    with pytest.raises(LimitExceeded):
        a.try_send_many([(FrameKind.PING, b"not sent either"), (FrameKind.MESSAGE, bytes(a.frame_bytes_max + 1))])
    assert a.fill() == (0, 0), "a refused batch sends nothing"
    with pytest.raises(AssertionError, match="kind 0"):
        a.try_send_many([(0, b"")])
    a.close()
    with pytest.raises(ClosedError):
        a.try_send_many(frames)


def test_a_sleeping_reader_is_rung_at_once_and_once_per_sleep_however_many_frames(
    workers: tuple[WorkerMesh, WorkerMesh],
) -> None:
    a, b = ring_links(workers)
    spec = workers[1].spec
    bell_of_b = spec.peers[0].in_bell_fd
    loop = asyncio.new_event_loop()

    class Idle:
        def on_frames(self, link: Link, frames: list[Frame]) -> None: ...
        def on_writable(self, link: Link) -> None: ...
        def on_broken(self, link: Link, error: Exception) -> None: ...

    try:
        a.start(loop, Idle())
        assert doorbell_count(bell_of_b) == 1, "a starting link wakes its peer once"
        loop.run_until_complete(asyncio.sleep(0))
        assert native.speedups is not None
        memory = workers[1]._memory
        assert memory is not None
        assert native.speedups.ring_reader_sleep(memory, ring_offset(0, 1, worker_count=2, ring_bytes=4096))
        assert a.try_send(FrameKind.PING, b"first")
        assert doorbell_count(bell_of_b) == 1, "rung by the send itself: no loop turn, timer or poll"
        for i in range(10):
            assert a.try_send(FrameKind.PING, bytes([i]))
        loop.run_until_complete(asyncio.sleep(0))
        assert doorbell_count(bell_of_b) == 0, "the reader was rung once for this sleep"
        assert len(b.receive()) == 11
    finally:
        a.close()
        loop.close()


def test_a_frame_sent_after_the_reader_went_to_sleep_is_handled_in_the_doorbell_callback(
    workers: tuple[WorkerMesh, WorkerMesh],
) -> None:
    """The reader drains, finds its ring empty and sleeps; the writer's next frame rings the
    doorbell, and the reader's doorbell callback hands it over itself: no later loop turn, timer
    or periodic poll is needed for the frame to arrive."""
    a, b = ring_links(workers)
    loop = asyncio.new_event_loop()
    got: list[Frame] = []

    class Collect:
        def on_frames(self, link: Link, frames: list[Frame]) -> None:
            got.extend(frames)

        def on_writable(self, link: Link) -> None: ...
        def on_broken(self, link: Link, error: Exception) -> None: ...

    class NoScheduling:
        """A loop that runs nothing: only the doorbell fd's callback, called by the test."""

        def __init__(self) -> None:
            self.readers: dict[int, object] = {}
            self.soon: list[object] = []

        def call_soon(self, callback: object, /) -> object:
            self.soon.append(callback)
            return None

        def add_reader(self, fd: int, callback: object, /) -> None:
            self.readers[fd] = callback

        def remove_reader(self, fd: int, /) -> bool:
            return self.readers.pop(fd, None) is not None

        def add_writer(self, fd: int, callback: object, /) -> None: ...

        def remove_writer(self, fd: int, /) -> bool:
            return False

    reader_loop = NoScheduling()
    try:
        a.start(loop, Collect())
        b.start(reader_loop, Collect())
        assert len(reader_loop.soon) == 1, "the start drains once"
        reader_loop.soon.pop()()  # type: ignore[operator]  # the ring is empty: the reader sleeps
        assert got == [] and reader_loop.soon == []
        assert a.try_send(FrameKind.MESSAGE, b"after the sleep")
        bell = workers[1].spec.peers[0].in_bell_fd
        callback = reader_loop.readers[bell]
        callback()  # type: ignore[operator]  # what the loop runs when the eventfd is readable
        assert got == [(FrameKind.MESSAGE, b"after the sleep")]
        assert reader_loop.soon == [], "drained and asleep again: nothing left for a later turn"
    finally:
        a.close()
        b.close()
        loop.close()


def test_a_scribbled_ring_breaks_the_link_instead_of_delivering_garbage(
    workers: tuple[WorkerMesh, WorkerMesh],
) -> None:
    a, b = ring_links(workers)
    assert a.try_send(FrameKind.PING, b"fine")
    memory = workers[1]._memory
    assert memory is not None
    data = ring_offset(0, 1, worker_count=2, ring_bytes=4096) + 256
    memory[data : data + 4] = (4096).to_bytes(4, "little")  # a length no record can have
    with pytest.raises(CorruptData):
        b.receive()
    loop = asyncio.new_event_loop()
    broken: list[Exception] = []

    class Watcher:
        def on_frames(self, link: Link, frames: list[Frame]) -> None:
            raise AssertionError("nothing valid to deliver")

        def on_writable(self, link: Link) -> None: ...

        def on_broken(self, link: Link, error: Exception) -> None:
            broken.append(error)

    try:
        b.start(loop, Watcher())
        loop.run_until_complete(asyncio.wait_for(asyncio.sleep(0), DEADLINE_S))
        assert len(broken) == 1 and isinstance(broken[0], CorruptData)
    finally:
        b.close()
        loop.close()


def test_a_restarted_producer_wakes_a_reader_its_dead_incarnation_left_sleeping(
    workers: tuple[WorkerMesh, WorkerMesh],
) -> None:
    """Worker 0 cleared worker 1's sleep flag while publishing, then died before ringing."""
    a, b = ring_links(workers)
    memory = workers[1]._memory
    assert memory is not None and native.speedups is not None
    offset = ring_offset(0, 1, worker_count=2, ring_bytes=4096)
    assert native.speedups.ring_reader_sleep(memory, offset)
    assert native.speedups.ring_push(memory, offset, FrameKind.PING, b"orphan") == 2  # the ring never came
    loop = asyncio.new_event_loop()
    got: list[Frame] = []
    done: asyncio.Future[None] = loop.create_future()

    class Reader:
        def on_frames(self, link: Link, frames: list[Frame]) -> None:
            got.extend(frames)
            if not done.done():
                done.set_result(None)

        def on_writable(self, link: Link) -> None: ...
        def on_broken(self, link: Link, error: Exception) -> None: ...

    try:
        # worker 1 sleeps: only its doorbell brings it back (and then it drains)
        loop.add_reader(workers[1].spec.peers[0].in_bell_fd, lambda: b.start(loop, Reader()))
        a.start(loop, Reader())  # the restarted worker 0
        loop.run_until_complete(asyncio.wait_for(done, DEADLINE_S))
        assert got == [(FrameKind.PING, b"orphan")]
    finally:
        a.close()
        b.close()
        loop.close()
