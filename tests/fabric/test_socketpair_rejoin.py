"""The socketpair fallback's rejoin contract: one end of a link dies and its successor comes back
over a fresh socketpair, handed to the survivor by the supervisor (RingMesh.prepare_spawn, the
rejoin channel, WorkerMesh.take_handovers; see fabric/socketpair.py).

What the survivor's link promises across the restart:
- nothing stale is delivered: frames it accepted for the dead peer never reach the successor, and
  half a record the dead peer left is never a frame;
- the dead peer's last whole frames are still delivered, before any frame of the successor;
- ordering, credit and backpressure hold after the rejoin exactly as before it;
- a producer paused on the dead peer's full link resumes once the fresh link is there;
- the router's HELLO / INTEREST_RESET resync runs over the fresh link (test_socketpair_resync.py).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from appliance.errors import BrokenError
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.mesh import RingMesh, attach_mesh, create_mesh
from appliance.fabric.socketpair import SocketpairLink

CAPACITY = 4096
DEADLINE_S = 20.0


def fresh_ends() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def receive_all(reader: SocketpairLink, writer: SocketpairLink | None = None) -> list[Frame]:
    """Everything `reader` can get now (the writer, when alive, pushes out what it buffered)."""
    received: list[Frame] = []
    while True:
        flushed = writer.flush() if writer is not None else True
        batch = reader.receive()
        received.extend(batch)
        if not batch and flushed:
            return received


def numbered(kind: FrameKind, start: int, count: int) -> list[Frame]:
    return [(int(kind), i.to_bytes(4, "big") * (1 + i % 40)) for i in range(start, start + count)]


class Restart:
    """A survivor's rejoinable link to a peer that dies and restarts over a fresh socketpair."""

    def __init__(self) -> None:
        survivor_end, first_end = fresh_ends()
        self.sockets = [survivor_end, first_end]
        self.survivor_end = survivor_end
        self.peer_end = first_end
        self.survivor = SocketpairLink(survivor_end, peer=1, capacity=CAPACITY, rejoinable=True)
        self.first_life = SocketpairLink(first_end, peer=0, capacity=CAPACITY, rejoinable=True)

    def die(self) -> None:
        """The peer process is gone: the kernel closes its end."""
        self.first_life.close()
        self.peer_end.close()

    def restart(self) -> SocketpairLink:
        survivor_end, peer_end = fresh_ends()
        self.sockets += [survivor_end, peer_end]
        self.survivor.rejoin(survivor_end)  # what WorkerMesh does with a handover
        self.survivor_end.close()
        self.survivor_end, self.peer_end = survivor_end, peer_end
        return SocketpairLink(peer_end, peer=0, capacity=CAPACITY, rejoinable=True)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def restart() -> Iterator[Restart]:
    made = Restart()
    yield made
    made.close()


def test_a_dead_peer_detaches_a_rejoinable_link_instead_of_breaking_it(restart: Restart) -> None:
    assert restart.first_life.try_send(FrameKind.PING, b"last words")
    assert restart.first_life.flush()
    restart.die()
    assert receive_all(restart.survivor) == [(FrameKind.PING, b"last words")]
    assert restart.survivor.receive() == []  # EOF is not BrokenError: a rejoin will come
    accepted = 0
    while restart.survivor.try_send(FrameKind.MESSAGE, bytes(100)):  # like a ring whose reader died
        accepted += 1
        restart.survivor.flush()
    assert accepted == CAPACITY // 112, "the old credit lasts exactly one ring's worth, then backpressure"


def test_nothing_sent_to_the_dead_peer_reaches_its_successor(restart: Restart) -> None:
    stale = numbered(FrameKind.MESSAGE, 0, 20)
    for frame in stale:
        assert restart.survivor.try_send(*frame)
    restart.survivor.flush()
    assert restart.first_life.receive(3) == stale[:3]  # it read some, then died
    for frame in numbered(FrameKind.MESSAGE, 20, 5):  # accepted while it is dying, never read
        restart.survivor.try_send(*frame)
    restart.die()
    second_life = restart.restart()
    fresh = numbered(FrameKind.INTEREST_ADD, 1000, 30)
    for frame in fresh:
        assert restart.survivor.try_send(*frame)
    assert receive_all(second_life, restart.survivor) == fresh


def test_the_dead_peers_whole_frames_come_first_and_its_half_record_never(restart: Restart) -> None:
    last_words = numbered(FrameKind.MESSAGE, 0, 6)
    for frame in last_words:
        assert restart.first_life.try_send(*frame)
    assert restart.first_life.flush()
    assert restart.first_life.try_send(FrameKind.MESSAGE, bytes(range(200)))
    whole = bytes(restart.first_life._tx_pending)
    restart.peer_end.sendall(whole[: len(whole) // 2])  # it died in the middle of a send
    restart.die()
    second_life = restart.restart()
    hello = [(int(FrameKind.HELLO), b""), *numbered(FrameKind.INTEREST_ADD, 50, 10)]
    for frame in hello:
        assert second_life.try_send(*frame)
    assert receive_all(restart.survivor, second_life) == last_words + hello


def test_frames_of_the_old_life_waiting_in_the_survivor_hold_no_credit_in_the_new_one(restart: Restart) -> None:
    old = numbered(FrameKind.MESSAGE, 0, 8)
    for frame in old:
        assert restart.first_life.try_send(*frame)
    assert restart.first_life.flush()
    restart.survivor.receive(1)  # the rest of the old life waits in the survivor
    restart.die()
    second_life = restart.restart()
    new: list[Frame] = []
    received: list[Frame] = list(restart.survivor.receive(1))
    for i in range(300):  # many times the capacity: credits of the new life must add up exactly
        frame = (int(FrameKind.MESSAGE), bytes([i % 256]) * (i * 13 % 300))
        while not second_life.try_send(*frame):
            second_life.flush()
            received.extend(restart.survivor.receive(3))
            restart.survivor.flush()  # the credit goes back
        new.append(frame)
    received.extend(receive_all(restart.survivor, second_life))
    assert received == old[1:] + new


def test_ordering_credit_and_backpressure_hold_in_both_directions_after_rejoins(restart: Restart) -> None:
    link_to_peer = restart.survivor
    restart.die()
    for life in range(3):
        peer = restart.restart()
        for a, b in ((link_to_peer, peer), (peer, link_to_peer)):
            sent: list[Frame] = []
            received: list[Frame] = []
            for i in range(250):
                frame = (1 + (i + life) % 6, bytes([i % 256]) * ((i * 37) % (a.frame_bytes_max + 1)))
                for _ in range(1000):
                    if a.try_send(*frame):
                        break
                    a.flush()
                    received.extend(b.receive(5))
                    b.flush()  # the credit goes back
                else:
                    raise AssertionError("a link is full only while frames are in flight")
                sent.append(frame)
            received.extend(receive_all(b, a))
            assert received == sent
        assert link_to_peer.rejoins == life + 1
        peer.close()
        restart.peer_end.close()  # this life dies too


def test_a_producer_paused_on_the_dead_peers_full_link_resumes_after_the_rejoin(restart: Restart) -> None:
    loop = asyncio.new_event_loop()

    class Handler:
        def __init__(self) -> None:
            self.writable = loop.create_future()
            self.frames: list[Frame] = []
            self.broken: list[Exception] = []

        def on_frames(self, link: object, frames: list[Frame]) -> None:
            self.frames.extend(frames)

        def on_writable(self, link: object) -> None:
            if not self.writable.done():
                self.writable.set_result(None)

        def on_broken(self, link: object, error: Exception) -> None:
            self.broken.append(error)

    try:
        handler = Handler()
        restart.survivor.start(loop, handler)
        restart.die()
        while restart.survivor.try_send(FrameKind.MESSAGE, bytes(200)):
            pass
        loop.run_until_complete(asyncio.sleep(0))  # the loop notices the EOF
        second_life = restart.restart()
        loop.run_until_complete(asyncio.wait_for(handler.writable, DEADLINE_S))
        assert restart.survivor.try_send(FrameKind.MESSAGE, b"after the rejoin")
        loop.run_until_complete(asyncio.sleep(0))  # the started link flushes at the end of the turn
        assert receive_all(second_life) == [(FrameKind.MESSAGE, b"after the rejoin")]
        assert second_life.try_send(FrameKind.PONG, b"from the second life")
        assert second_life.flush()
        deadline = time.monotonic() + DEADLINE_S
        while not handler.frames:
            assert time.monotonic() < deadline
            loop.run_until_complete(asyncio.sleep(0.001))
        assert handler.frames == [(FrameKind.PONG, b"from the second life")]
        assert handler.broken == []
    finally:
        restart.survivor.close()
        loop.close()


def test_a_link_nobody_will_rejoin_still_breaks_on_the_peers_eof() -> None:
    survivor_end, peer_end = fresh_ends()
    try:
        link = SocketpairLink(survivor_end, peer=1, capacity=CAPACITY)
        peer_end.close()
        with pytest.raises(BrokenError):
            link.receive()
        replacement, other = fresh_ends()
        with pytest.raises(BrokenError):
            link.rejoin(replacement)
        replacement.close()
        other.close()
    finally:
        survivor_end.close()


# --- through the mesh: the supervisor's side and a real process ---------------------------------------


def spawn_echo(mesh: RingMesh, index: int) -> subprocess.Popen[bytes]:
    """What the supervisor does: a spec (fresh socketpairs after the first life), then let go of it."""
    spec, refused = mesh.prepare_spawn(index)
    assert refused == []
    child = subprocess.Popen([sys.executable, "-c", ECHO, spec.to_json()], pass_fds=spec.fds())
    mesh.spawned(index)
    return child


ECHO = (
    "import sys\n"
    "from appliance.fabric.mesh import WorkerMeshSpec, attach_mesh\n"
    "link = attach_mesh(WorkerMeshSpec.from_json(sys.argv[1])).links[0]\n"
    "pending = []\n"
    "while True:\n"
    "    pending.extend(link.receive())\n"
    "    while pending and link.try_send(3, pending[0][1]):\n"
    "        pending.pop(0)\n"
    "    link.flush()\n"
)


def test_a_killed_worker_process_comes_back_over_fresh_links_handed_to_the_survivor() -> None:
    mesh = create_mesh(2, transport="socketpair", ring_bytes=16384)
    spec0, _ = mesh.prepare_spawn(0)
    worker0 = attach_mesh(mesh.spec_for_local(0, rejoinable=True))
    mesh.spawned(0)
    children: list[subprocess.Popen[bytes]] = []
    try:
        assert spec0.rejoin_fd >= 0
        link = worker0.links[1]
        assert isinstance(link, SocketpairLink)
        for life in range(3):
            children.append(spawn_echo(mesh, 1))
            payloads = [f"life {life} frame {i}".encode() * (1 + i % 30) for i in range(2000)]
            sent = 0
            echoed: list[bytes] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(echoed) < len(payloads):
                assert time.monotonic() < deadline, f"life {life}: echoed {len(echoed)} of {len(payloads)}"
                worker0.take_handovers()
                while sent < len(payloads) and link.try_send(FrameKind.MESSAGE, payloads[sent]):
                    sent += 1
                link.flush()
                echoed.extend(payload for _, payload in link.receive())
            assert echoed == payloads  # in order, and nothing from an earlier life
            children[-1].send_signal(signal.SIGSTOP)
            for _ in range(50):  # frames for this life that it will never read
                link.try_send(FrameKind.MESSAGE, b"never read")
            link.flush()
            children[-1].kill()
            children[-1].wait(timeout=DEADLINE_S)
        assert link.rejoins == 2  # the first life used create_mesh's pair
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=DEADLINE_S)
        worker0.close()
        mesh.close()


def test_the_supervisor_side_skips_a_dead_sibling_and_reports_one_that_stopped_reading() -> None:
    mesh = create_mesh(3, transport="socketpair", ring_bytes=4096)
    worker0 = attach_mesh(mesh.spec_for_local(0, rejoinable=True))  # alive, but never reads its channel
    try:
        for index in range(3):
            mesh.prepare_spawn(index)
            mesh.spawned(index)  # worker 2's ends are closed at once: it died right away
        refused: list[int] = []
        for _ in range(10_000):  # each restart of worker 1 hands worker 0 one more socket it never takes
            refused = mesh.prepare_spawn(1)[1]
            mesh.spawned(1)
            if refused:
                break
        assert refused == [0], "worker 2 is gone (skipped); worker 0 is alive and not reading"
        assert worker0.take_handovers() > 0  # what was sent before the channel filled up is intact
    finally:
        worker0.close()
        mesh.close()
