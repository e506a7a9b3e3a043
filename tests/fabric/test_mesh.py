"""The mesh of N workers: wiring, fd inheritance across processes, restarts, and a clean /dev/shm."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance import native
from appliance.errors import CorruptData
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.mesh import (
    WorkerMeshSpec,
    attach_mesh,
    create_mesh,
    ring_offset,
    segment_bytes,
)

WORKER_SCRIPT = Path(__file__).with_name("_mesh_worker.py")
DEADLINE_S = 30.0
TRANSPORTS = [
    pytest.param("ring", marks=pytest.mark.skipif(not native.ENABLED, reason="appliance._native not in use")),
    "socketpair",
]


def our_shm_names(pid: int) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(f"appliance-{pid}-"))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("worker_count", [2, 3, 4])
def test_every_ordered_pair_of_workers_is_wired(transport: str, worker_count: int) -> None:
    mesh = create_mesh(worker_count, transport=transport, ring_bytes=4096)  # type: ignore[arg-type]
    workers = [attach_mesh(mesh.spec_for_local(k)) for k in range(worker_count)]
    try:
        for src, worker in enumerate(workers):
            assert sorted(worker.links) == [k for k in range(worker_count) if k != src]
            for dst, link in worker.links.items():
                assert link.peer == dst
                assert link.try_send(FrameKind.MESSAGE, f"{src}->{dst}".encode())
                assert link.flush()
        for dst, worker in enumerate(workers):
            for src, link in worker.links.items():
                assert link.receive() == [(FrameKind.MESSAGE, f"{src}->{dst}".encode())]
    finally:
        for worker in workers:
            worker.close()
        mesh.close()


def test_the_segment_is_unnamed_from_the_moment_create_returns() -> None:
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(3, transport="ring", ring_bytes=8192)
    try:
        assert our_shm_names(os.getpid()) == []
        assert os.fstat(mesh.shm_fd).st_size == segment_bytes(3, 8192)
        offsets = {ring_offset(s, d, worker_count=3, ring_bytes=8192) for s in range(3) for d in range(3) if s != d}
        assert len(offsets) == 6
        assert all(offset % 4096 == 0 for offset in offsets)
    finally:
        mesh.close()


def test_a_killed_supervisor_leaves_nothing_in_dev_shm() -> None:
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    code = (
        "import sys\n"
        "from appliance.fabric.mesh import create_mesh\n"
        "mesh = create_mesh(4, transport='ring', ring_bytes=65536)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        assert our_shm_names(child.pid) == []
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=DEADLINE_S)
        if child.stdin is not None:
            child.stdin.close()
        if child.stdout is not None:
            child.stdout.close()
    assert our_shm_names(child.pid) == []


def test_a_spec_round_trips_through_json_and_lists_its_fds() -> None:
    mesh = create_mesh(3, transport="socketpair", ring_bytes=4096)
    try:
        spec = mesh.spec_for(1)
        assert WorkerMeshSpec.from_json(spec.to_json()) == spec
        assert sorted(spec.fds()) == sorted(peer.socket_fd for peer in spec.peers)
        assert [peer.peer for peer in spec.peers] == [0, 2]
    finally:
        mesh.close()


def test_attaching_with_a_spec_that_does_not_match_the_segment_is_refused() -> None:
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(2, transport="ring", ring_bytes=4096)
    try:
        spec = mesh.spec_for_local(0)
        wrong = WorkerMeshSpec.from_json(spec.to_json().replace('"ring_bytes": 4096', '"ring_bytes": 8192'))
        with pytest.raises(CorruptData, match="layout"):
            attach_mesh(wrong)
        for fd in spec.fds():
            os.close(fd)
    finally:
        mesh.close()


# --- two processes ---------------------------------------------------------------------------------


class Gatherer:
    def __init__(self, loop: asyncio.AbstractEventLoop, expected: int) -> None:
        self.frames: list[Frame] = []
        self.expected = expected
        self.done: asyncio.Future[None] = loop.create_future()
        self.resume: Callable[[], None] = lambda: None

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        self.frames.extend(frames)
        if len(self.frames) >= self.expected and not self.done.done():
            self.done.set_result(None)

    def on_writable(self, link: Link) -> None:
        self.resume()

    def on_broken(self, link: Link, error: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(error)


def echo_round(link: Link, *, count: int, salt: int) -> list[Frame]:
    """Sends `count` PINGs through `link` (pausing when full), returns the echoes received."""
    loop = asyncio.new_event_loop()
    gatherer = Gatherer(loop, count)
    def size(i: int) -> int:  # mostly small, every 97th frame as large as the link allows
        return link.frame_bytes_max - 2 if i % 97 == 0 else i % 300

    frames = [(FrameKind.PING, salt.to_bytes(2, "big") + bytes([i % 256]) * size(i)) for i in range(count)]
    frames.append((FrameKind.HELLO, b"stop"))
    position = 0

    def pump() -> None:
        nonlocal position
        while position < len(frames) and link.try_send(*frames[position]):
            position += 1

    gatherer.resume = pump
    try:
        link.start(loop, gatherer)
        loop.call_soon(pump)
        loop.run_until_complete(asyncio.wait_for(gatherer.done, DEADLINE_S))
    finally:
        link.close()
        loop.close()
    assert gatherer.frames == [(FrameKind.PONG, payload) for _, payload in frames[:-1]]
    return gatherer.frames


def start_worker(spec: WorkerMeshSpec) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER_SCRIPT), spec.to_json()], pass_fds=spec.fds())


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=DEADLINE_S)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_frames_cross_processes_through_inherited_fds_with_backpressure(
    transport: str, reap: list[subprocess.Popen[bytes]]
) -> None:
    mesh = create_mesh(2, transport=transport, ring_bytes=16384)  # type: ignore[arg-type]
    worker0 = attach_mesh(mesh.spec_for_local(0))
    try:
        child = start_worker(mesh.spec_for(1))
        reap.append(child)
        echo_round(worker0.links[1], count=10_000, salt=1)
        assert child.wait(timeout=DEADLINE_S) == 0
        assert our_shm_names(os.getpid()) == []
    finally:
        worker0.close()
        mesh.close()


def test_a_restarted_worker_gets_the_same_rings_again(reap: list[subprocess.Popen[bytes]]) -> None:
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(2, transport="ring", ring_bytes=16384)
    try:
        for incarnation in range(2):
            worker0 = attach_mesh(mesh.spec_for_local(0))
            child = start_worker(mesh.spec_for(1))
            reap.append(child)
            echo_round(worker0.links[1], count=2_000, salt=incarnation)
            assert child.wait(timeout=DEADLINE_S) == 0
            worker0.close()
    finally:
        mesh.close()


def test_a_worker_killed_mid_stream_leaves_a_consistent_ring(reap: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL at a random moment of a flood: whatever the dead worker published is whole."""
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(2, transport="ring", ring_bytes=16384)
    worker0 = attach_mesh(mesh.spec_for_local(0))
    flood = (
        "import sys\n"
        "from appliance.fabric.mesh import WorkerMeshSpec, attach_mesh\n"
        "link = attach_mesh(WorkerMeshSpec.from_json(sys.argv[1])).links[0]\n"
        "i = 0\n"
        "while True:\n"
        "    if link.try_send(6, i.to_bytes(4, 'big') * (1 + i % 50)):\n"
        "        i += 1\n"
    )
    try:
        spec = mesh.spec_for(1)
        child = subprocess.Popen([sys.executable, "-c", flood, spec.to_json()], pass_fds=spec.fds())
        reap.append(child)
        link = worker0.links[1]
        received: list[Frame] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < 5_000 and time.monotonic() < deadline:
            received.extend(link.receive())
        child.kill()
        child.wait(timeout=DEADLINE_S)
        while batch := link.receive():
            received.extend(batch)
        assert len(received) >= 5_000
        for i, (kind, payload) in enumerate(received):
            assert (kind, payload) == (6, i.to_bytes(4, "big") * (1 + i % 50))
    finally:
        worker0.close()
        mesh.close()


def test_a_tiny_ring_between_two_spinning_processes_keeps_every_byte_in_order(
    reap: list[subprocess.Popen[bytes]],
) -> None:
    """Memory ordering under real concurrency: a 4 KiB ring wraps every few frames."""
    if not native.ENABLED:
        pytest.skip("appliance._native not in use")
    mesh = create_mesh(2, transport="ring", ring_bytes=4096)
    worker0 = attach_mesh(mesh.spec_for_local(0))
    count = 20_000
    producer = (
        "import sys\n"
        "from appliance.fabric.mesh import WorkerMeshSpec, attach_mesh\n"
        "link = attach_mesh(WorkerMeshSpec.from_json(sys.argv[1])).links[0]\n"
        f"for i in range({count}):\n"
        "    payload = (i * 2654435761 % 2**32).to_bytes(4, 'big') * (i % 256)\n"
        "    while not link.try_send(1 + i % 7, payload):\n"
        "        pass\n"
    )
    try:
        spec = mesh.spec_for(1)
        child = subprocess.Popen([sys.executable, "-c", producer, spec.to_json()], pass_fds=spec.fds())
        reap.append(child)
        link = worker0.links[1]
        received: list[Frame] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < count and time.monotonic() < deadline:
            received.extend(link.receive())
        assert child.wait(timeout=DEADLINE_S) == 0
        assert len(received) == count
        for i, frame in enumerate(received):
            assert frame == (1 + i % 7, (i * 2654435761 % 2**32).to_bytes(4, "big") * (i % 256))
    finally:
        worker0.close()
        mesh.close()
