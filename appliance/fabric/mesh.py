"""The full mesh of local links for N workers: created by the supervisor, attached by each worker.

Ownership, so that nothing is ever left in /dev/shm, whichever process dies:
- The supervisor creates ONE POSIX shared-memory segment for all rings (posix_ipc), maps it, and
  unlinks its name at once: from then on the segment lives only through file descriptors and
  mappings, and the kernel frees it when the last one goes. Doorbells are eventfds (no name at all).
- Workers get the fds by inheritance (`subprocess.Popen(pass_fds=spec.fds())`, or fork), so fd
  numbers are the same in the worker; the supervisor keeps its copies open so a restarted worker
  gets the same fds again, and attaches to rings whose state survived (a ring is always consistent:
  a record is published only once fully written).
- `RingMesh.close()` (supervisor stop) closes its fds and mapping; `WorkerMesh.close()` (worker stop)
  closes the worker's. Nobody ever needs to unlink anything after `create_mesh` returns.

Segment layout: a 4096-byte mesh header (magic, version, worker count, ring capacity, ring stride),
then one ring region (native/ring.h) per ordered pair (src, dst), src != dst, page-aligned.

Without appliance._native the same API builds the socketpair fallback: one AF_UNIX stream
socketpair per unordered worker pair. A socket cannot outlive a worker the way a ring does, so a
restarted worker gets FRESH socketpairs to every sibling (`prepare_spawn`): it inherits its ends,
and each running sibling is handed its end over that sibling's rejoin channel (handover.py), where
`WorkerMesh.listen_for_rejoins` swaps it into the existing link (SocketpairLink.rejoin). The
supervisor keeps a worker's socket ends only until that worker is spawned (`spawned`), so a
worker's death is EOF to its siblings, and nothing of a dead incarnation is ever reused.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import secrets
import socket
import struct
from dataclasses import asdict, dataclass, field
from typing import Literal

import posix_ipc  # type: ignore[import-not-found,import-untyped,unused-ignore]

from appliance import limits, native
from appliance.errors import ApplianceError, CorruptData
from appliance.fabric.frames import check_capacity, frame_bytes_max
from appliance.fabric.handover import Delivery, channel_pair, receive_handovers, send_handover
from appliance.fabric.link import Link, LinkLoop
from appliance.fabric.ring import RingLink
from appliance.fabric.socketpair import SocketpairLink

logger = logging.getLogger(__name__)

Transport = Literal["ring", "socketpair"]
MESH_MAGIC = 0x4853454D4C505041  # "APPLMESH", little-endian
MESH_VERSION = 1
MESH_HEADER = struct.Struct("<QIIQQ")  # magic, version, worker_count, ring_bytes, ring_stride
MESH_HEADER_BYTES = 4096
PAGE_BYTES = 4096
RING_HEADER_BYTES = 256  # native/ring.h RING_HEADER_BYTES


def default_transport() -> Transport:
    """Rings when the native module is in use, else the socketpair fallback."""
    return "ring" if native.ENABLED else "socketpair"


def ring_stride(ring_bytes: int) -> int:
    return (RING_HEADER_BYTES + ring_bytes + PAGE_BYTES - 1) // PAGE_BYTES * PAGE_BYTES


def ring_index(src: int, dst: int, worker_count: int) -> int:
    assert src != dst
    assert 0 <= src < worker_count and 0 <= dst < worker_count
    return src * (worker_count - 1) + (dst if dst < src else dst - 1)


def ring_offset(src: int, dst: int, *, worker_count: int, ring_bytes: int) -> int:
    return MESH_HEADER_BYTES + ring_index(src, dst, worker_count) * ring_stride(ring_bytes)


def segment_bytes(worker_count: int, ring_bytes: int) -> int:
    return MESH_HEADER_BYTES + worker_count * (worker_count - 1) * ring_stride(ring_bytes)


@dataclass(frozen=True, slots=True)
class PeerFds:
    """One worker's fds toward one peer; -1 where the transport has none."""

    peer: int
    out_bell_fd: int = -1  # ring: eventfd we write (wakes the peer)
    in_bell_fd: int = -1  # ring: eventfd we read (the peer wakes us)
    socket_fd: int = -1  # socketpair: our end


@dataclass(frozen=True, slots=True)
class WorkerMeshSpec:
    """Everything worker `worker_index` needs to attach; the fd numbers are valid in the worker."""

    transport: Transport
    worker_index: int
    worker_count: int
    ring_bytes: int
    shm_fd: int = -1
    peers: tuple[PeerFds, ...] = field(default_factory=tuple)
    rejoin_fd: int = -1  # socketpair: the worker's end of its rejoin channel (handover.py)

    def fds(self) -> list[int]:
        """Fds to pass to the worker process (`pass_fds`)."""
        found = [self.shm_fd] if self.shm_fd >= 0 else []
        if self.rejoin_fd >= 0:
            found.append(self.rejoin_fd)
        for peer in self.peers:
            found.extend(fd for fd in (peer.out_bell_fd, peer.in_bell_fd, peer.socket_fd) if fd >= 0)
        return found

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerMeshSpec:
        raw = json.loads(text)
        peers = tuple(PeerFds(**peer) for peer in raw.pop("peers"))
        return cls(peers=peers, **raw)


class RingMesh:
    """The supervisor's side: owns every fd of the mesh until close()."""

    def __init__(self, *, transport: Transport, worker_count: int, ring_bytes: int) -> None:
        assert worker_count >= 1
        check_capacity(ring_bytes)
        self.transport: Transport = transport
        self.worker_count = worker_count
        self.ring_bytes = ring_bytes
        self.shm_fd = -1
        self._memory: mmap.mmap | None = None
        self._bells: dict[tuple[int, int], int] = {}  # (src, dst) -> eventfd that wakes dst
        self._sockets: dict[tuple[int, int], socket.socket] = {}  # (worker, peer) -> worker's end, until spawned
        self._channels: dict[int, socket.socket] = {}  # worker -> supervisor's end of its rejoin channel
        self._channel_ends: dict[int, socket.socket] = {}  # worker -> worker's end, until spawned
        self._spawned: set[int] = set()  # workers holding their ends; a new spawn needs fresh ones
        self._closed = False

    def spec_for(self, worker_index: int, *, rejoinable: bool = False) -> WorkerMeshSpec:
        """Worker `worker_index`'s fds. `rejoinable` (socketpair) adds its rejoin channel: the links
        then wait for fresh sockets when a peer dies, instead of breaking (prepare_spawn's spec)."""
        assert 0 <= worker_index < self.worker_count
        assert not self._closed
        peers = []
        for peer in range(self.worker_count):
            if peer == worker_index:
                continue
            if self.transport == "ring":
                peers.append(
                    PeerFds(
                        peer=peer,
                        out_bell_fd=self._bells[(worker_index, peer)],
                        in_bell_fd=self._bells[(peer, worker_index)],
                    )
                )
            else:
                peers.append(PeerFds(peer=peer, socket_fd=self._sockets[(worker_index, peer)].fileno()))
        channel = self._channel_ends.get(worker_index) if rejoinable else None
        return WorkerMeshSpec(
            transport=self.transport,
            worker_index=worker_index,
            worker_count=self.worker_count,
            ring_bytes=self.ring_bytes,
            shm_fd=self.shm_fd,
            peers=tuple(peers),
            rejoin_fd=-1 if channel is None else channel.fileno(),
        )

    def prepare_spawn(self, worker_index: int) -> tuple[WorkerMeshSpec, list[int]]:
        """Supervisor, before every spawn of a worker: its spec, and the running siblings that could
        not be handed their end of a fresh link (alive but not reading: restart them too).

        Rings: the same fds every time. Socketpairs: the first spawn gets the pairs made by
        create_mesh; a later one gets fresh pairs to every sibling (see the module docstring)."""
        refused: list[int] = []
        if self.transport == "socketpair" and worker_index in self._spawned:
            refused = self._renew(worker_index)
        return self.spec_for(worker_index, rejoinable=True), refused

    def spawned(self, worker_index: int) -> None:
        """Supervisor, once the worker process holds its ends: drop our copies of them, so that the
        worker's death is EOF to its siblings (rings: we keep every fd for the next spawn)."""
        if self.transport != "socketpair":
            return
        self._spawned.add(worker_index)
        for peer in range(self.worker_count):
            if peer != worker_index:
                self._sockets.pop((worker_index, peer)).close()
        self._channel_ends.pop(worker_index).close()

    def _renew(self, worker_index: int) -> list[int]:
        """Fresh socketpairs between `worker_index` and every sibling, and a fresh rejoin channel."""
        for old in (self._channels.pop(worker_index, None), self._channel_ends.pop(worker_index, None)):
            if old is not None:
                old.close()
        self._channels[worker_index], self._channel_ends[worker_index] = channel_pair()
        refused: list[int] = []
        for peer in range(self.worker_count):
            if peer == worker_index:
                continue
            unused = self._sockets.pop((worker_index, peer), None)  # made for a spawn that failed
            if unused is not None:
                unused.close()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sockets[(worker_index, peer)] = ours
            if peer not in self._spawned:  # never started yet: it takes the fresh end at its spawn
                stale = self._sockets.pop((peer, worker_index), None)
                if stale is not None:
                    stale.close()
                self._sockets[(peer, worker_index)] = theirs
                continue
            delivery = send_handover(self._channels[peer], worker_index, theirs)
            theirs.close()
            if delivery is Delivery.REFUSED:
                refused.append(peer)
            logger.debug("worker %d restarts: fresh link handed to worker %d (%s)", worker_index, peer,
                         delivery.value)
        return refused

    def spec_for_local(self, worker_index: int, *, rejoinable: bool = False) -> WorkerMeshSpec:
        """A spec on duplicated fds, to attach in this very process (tests, a one-process server).
        `rejoinable` keeps the rejoin channel (socketpair): the links then wait for handovers."""
        spec = self.spec_for(worker_index, rejoinable=rejoinable)
        peers = tuple(
            PeerFds(
                peer=peer.peer,
                out_bell_fd=_dup(peer.out_bell_fd),
                in_bell_fd=_dup(peer.in_bell_fd),
                socket_fd=_dup(peer.socket_fd),
            )
            for peer in spec.peers
        )
        return WorkerMeshSpec(
            transport=spec.transport,
            worker_index=worker_index,
            worker_count=spec.worker_count,
            ring_bytes=spec.ring_bytes,
            shm_fd=_dup(spec.shm_fd),
            peers=peers,
            rejoin_fd=_dup(spec.rejoin_fd),
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in self._bells.values():
            os.close(fd)
        for sock in (*self._sockets.values(), *self._channels.values(), *self._channel_ends.values()):
            sock.close()
        if self._memory is not None:
            self._memory.close()
        if self.shm_fd >= 0:
            os.close(self.shm_fd)


def _dup(fd: int) -> int:
    return os.dup(fd) if fd >= 0 else -1


def create_mesh(
    worker_count: int, *, transport: Transport | None = None, ring_bytes: int = limits.RING_BYTES
) -> RingMesh:
    """Supervisor: creates the links of `worker_count` workers. Nothing stays named in /dev/shm."""
    mesh = RingMesh(transport=transport or default_transport(), worker_count=worker_count, ring_bytes=ring_bytes)
    try:
        if mesh.transport == "ring":
            _create_rings(mesh)
        else:
            _create_socketpairs(mesh)
    except BaseException:
        mesh.close()
        raise
    return mesh


def _create_rings(mesh: RingMesh) -> None:
    assert native.ENABLED and native.speedups is not None, "rings need appliance._native"
    n = mesh.worker_count
    size = segment_bytes(n, mesh.ring_bytes)
    name = f"/appliance-{os.getpid()}-{secrets.token_hex(6)}"
    segment = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
    try:
        mesh.shm_fd = segment.fd
        mesh._memory = mmap.mmap(segment.fd, size)
    finally:
        segment.unlink()  # at once: from here on only fds and mappings keep it alive
    memory = mesh._memory
    MESH_HEADER.pack_into(memory, 0, MESH_MAGIC, MESH_VERSION, n, mesh.ring_bytes, ring_stride(mesh.ring_bytes))
    for src in range(n):
        for dst in range(n):
            if src != dst:
                offset = ring_offset(src, dst, worker_count=n, ring_bytes=mesh.ring_bytes)
                native.speedups.ring_init(memory, offset, mesh.ring_bytes, frame_bytes_max(mesh.ring_bytes))
                mesh._bells[(src, dst)] = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)


def _create_socketpairs(mesh: RingMesh) -> None:
    for worker in range(mesh.worker_count):
        mesh._channels[worker], mesh._channel_ends[worker] = channel_pair()
    for low in range(mesh.worker_count):
        for high in range(low + 1, mesh.worker_count):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            mesh._sockets[(low, high)] = a
            mesh._sockets[(high, low)] = b


class WorkerMesh:
    """A worker's side: its links, keyed by peer index; owns the inherited fds once attached."""

    def __init__(self, spec: WorkerMeshSpec, links: dict[int, Link], *, memory: mmap.mmap | None,
                 sockets: dict[int, socket.socket]) -> None:
        self.spec = spec
        self.links = links
        self._memory = memory
        self._sockets = sockets  # socketpair: peer -> our end (replaced by a rejoin)
        self._channel: socket.socket | None = None
        if spec.rejoin_fd >= 0:
            self._channel = socket.socket(fileno=spec.rejoin_fd)
            self._channel.setblocking(False)
        self._loop: LinkLoop | None = None
        self._closed = False

    def listen_for_rejoins(self, loop: LinkLoop) -> None:
        """Take the supervisor's handovers on `loop` from now on: each one is a fresh socket to a
        restarted sibling, swapped into the existing link (socketpair fallback; rings need none)."""
        assert self._loop is None
        if self._channel is not None and not self._closed:
            self._loop = loop
            loop.add_reader(self._channel.fileno(), self.take_handovers)

    def stop_rejoins(self) -> None:
        if self._loop is not None and self._channel is not None:
            self._loop.remove_reader(self._channel.fileno())
        self._loop = None

    def take_handovers(self) -> int:
        """Rejoin the links of every handover waiting on the channel; returns how many were taken."""
        if self._channel is None or self._closed:
            return 0
        try:
            handovers, supervisor_gone = receive_handovers(self._channel, limits.REJOIN_HANDOVERS_PER_TURN)
        except CorruptData:
            logger.exception("worker %d: bad handover on the rejoin channel", self.spec.worker_index)
            return 0
        for peer, sock in handovers:
            self._rejoin(peer, sock)
        if supervisor_gone and self._loop is not None:
            self._loop.remove_reader(self._channel.fileno())
            self._loop = None
        return len(handovers)

    def _rejoin(self, peer: int, sock: socket.socket) -> None:
        link = self.links.get(peer)
        if not isinstance(link, SocketpairLink):
            sock.close()
            logger.error("worker %d: handover for worker %d, which is not a socketpair peer", self.spec.worker_index,
                         peer)
            return
        try:
            link.rejoin(sock)
        except ApplianceError as error:
            sock.close()
            logger.warning("worker %d: cannot rejoin worker %d: %s", self.spec.worker_index, peer, error)
            return
        self._sockets.pop(peer).close()
        self._sockets[peer] = sock
        logger.debug("worker %d: rejoined restarted worker %d over a fresh socketpair", self.spec.worker_index, peer)

    def close(self) -> None:
        """Closes the links, the mapping and every fd of the spec in this process."""
        if self._closed:
            return
        self._closed = True
        for link in self.links.values():
            link.close()
        self.links.clear()
        if self._memory is not None:
            self._memory.close()
        for sock in self._sockets.values():
            sock.close()  # the socketpair fds of the spec, or those handed over since
        if self._channel is not None:
            self.stop_rejoins()
            self._channel.close()
        if self.spec.transport == "ring":
            for fd in self.spec.fds():
                os.close(fd)


def attach_mesh(spec: WorkerMeshSpec) -> WorkerMesh:
    """Worker: maps the inherited segment (or adopts its socket ends) and builds one link per peer."""
    if spec.transport == "socketpair":
        return _attach_socketpairs(spec)
    return _attach_rings(spec)


def _attach_rings(spec: WorkerMeshSpec) -> WorkerMesh:
    size = os.fstat(spec.shm_fd).st_size
    memory = mmap.mmap(spec.shm_fd, size)
    magic, version, worker_count, ring_bytes, stride = MESH_HEADER.unpack_from(memory, 0)
    if (magic, version) != (MESH_MAGIC, MESH_VERSION):
        memory.close()
        raise CorruptData("not an appliance ring mesh", path=f"fd:{spec.shm_fd}", offset=0)
    if (worker_count, ring_bytes, stride) != (spec.worker_count, spec.ring_bytes, ring_stride(spec.ring_bytes)):
        memory.close()
        raise CorruptData("mesh layout differs from the spec", path=f"fd:{spec.shm_fd}", offset=0)
    links: dict[int, Link] = {}
    me = spec.worker_index
    for peer in spec.peers:
        links[peer.peer] = RingLink(
            memory,
            peer=peer.peer,
            out_offset=ring_offset(me, peer.peer, worker_count=worker_count, ring_bytes=ring_bytes),
            in_offset=ring_offset(peer.peer, me, worker_count=worker_count, ring_bytes=ring_bytes),
            out_bell_fd=peer.out_bell_fd,
            in_bell_fd=peer.in_bell_fd,
        )
    return WorkerMesh(spec, links, memory=memory, sockets={})


def _attach_socketpairs(spec: WorkerMeshSpec) -> WorkerMesh:
    links: dict[int, Link] = {}
    sockets: dict[int, socket.socket] = {}
    rejoinable = spec.rejoin_fd >= 0  # a supervisor will hand fresh sockets to replace a dead peer's
    for peer in spec.peers:
        sock = socket.socket(fileno=peer.socket_fd)
        sockets[peer.peer] = sock
        links[peer.peer] = SocketpairLink(sock, peer=peer.peer, capacity=spec.ring_bytes, rejoinable=rejoinable)
    return WorkerMesh(spec, links, memory=None, sockets=sockets)
