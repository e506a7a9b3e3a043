"""Two-process ring microbenchmark: frames/s from one worker process to another.

    .venv/bin/python benchmarks/ring.py [--frames 2000000] [--size 128] [--repeat 3] [--modes ...]

Modes (each: a producer process and a consumer process, forked from this one, mesh of 2):
- ring-raw         appliance._native ring_push per frame / ring_pop batches, both sides spin:
                   the C ring plus the cost of one Python call per frame
- ring-link        RingLink.try_send per frame, consumer on an asyncio loop (on_frames, doorbells),
                   producer paused by backpressure and resumed by on_writable: what a worker does
- ring-link-batch  as ring-link, the producer hands over lists of 256 frames (try_send_many)
- socketpair-link  the fallback link, driven like ring-link

Prints, per mode, the consumer's wall-clock frames/s and the cpu-bound rate (frames per CPU second
of the busier process: what the pair does with a core each; meaningless for ring-raw, which spins),
median of the repeats and every run, then wall-rate ratios to socketpair-link. The machine is
shared: repeat, and read ratios rather than absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from appliance import limits, native
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.mesh import RingMesh, Transport, WorkerMeshSpec, attach_mesh, create_mesh, ring_offset
from appliance.fabric.ring import RingLink, ring_doorbell

MODES = ["ring-raw", "ring-link", "ring-link-batch", "socketpair-link"]
RING_BYTES = limits.RING_BYTES
KIND = int(FrameKind.MESSAGE)  # a plain int: an enum attribute lookup per frame would be measured too


class Pump:
    """Producer side of the link modes: sends until refused, resumes on on_writable."""

    def __init__(self, link: Link, frames: int, payload: bytes, *, batch: bool, done: asyncio.Future[None]) -> None:
        self.link = link
        self.left = frames
        self.payload = payload
        self.batch = batch
        self.done = done
        self.chunk: list[Frame] = [(KIND, payload)] * limits.LINK_BATCH_FRAMES_MAX
        self.chunk_start = 0

    def run(self) -> None:
        if self.batch:
            self._run_batches()
        else:
            send = self.link.try_send
            payload = self.payload
            left = self.left
            kind = KIND
            while left and send(kind, payload):
                left -= 1
            self.left = left
        if self.left == 0 and not self.done.done():
            self.done.set_result(None)

    def _run_batches(self) -> None:
        assert isinstance(self.link, RingLink)
        while self.left:
            end = min(len(self.chunk), self.chunk_start + self.left)
            chunk = self.chunk if end == len(self.chunk) else self.chunk[:end]
            index = self.link.try_send_many(chunk, self.chunk_start)
            self.left -= index - self.chunk_start
            if index < len(chunk):
                self.chunk_start = index
                return
            self.chunk_start = 0

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        raise AssertionError("the consumer sends nothing")

    def on_writable(self, link: Link) -> None:
        self.run()

    def on_broken(self, link: Link, error: Exception) -> None:
        raise error


class Count:
    def __init__(self, frames: int, done: asyncio.Future[None]) -> None:
        self.left = frames
        self.done = done
        self.first_s = 0.0

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        if not self.first_s:
            self.first_s = time.perf_counter()
        self.left -= len(frames)
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)

    def on_writable(self, link: Link) -> None:
        pass

    def on_broken(self, link: Link, error: Exception) -> None:
        raise error


def link_role(spec: WorkerMeshSpec, role: str, frames: int, size: int, batch: bool, results: Connection) -> None:
    import uvloop

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        mesh = attach_mesh(spec)
        link = mesh.links[1 - spec.worker_index]
        done: asyncio.Future[None] = loop.create_future()
        start_s = time.perf_counter()
        start_cpu_s = time.process_time()
        if role == "producer":
            pump = Pump(link, frames, bytes(size), batch=batch, done=done)
            link.start(loop, pump)
            loop.call_soon(pump.run)
            await done
            elapsed = time.perf_counter() - start_s
            while not link.flush():  # the socketpair may still hold bytes the kernel refused
                await asyncio.sleep(0.001)
        else:
            count = Count(frames, done)
            link.start(loop, count)
            await done
            elapsed = time.perf_counter() - count.first_s
        cpu_s = time.process_time() - start_cpu_s
        mesh.close()
        return elapsed, cpu_s

    results.send(uvloop.run(main()))


def raw_role(spec: WorkerMeshSpec, role: str, frames: int, size: int, results: Connection) -> None:
    speedups = native.speedups
    assert speedups is not None
    mesh = attach_mesh(spec)
    me = spec.worker_index
    memory = mesh._memory
    peer = mesh.spec.peers[0]
    start_cpu_s = time.process_time()
    if role == "producer":
        offset = ring_offset(me, 1 - me, worker_count=2, ring_bytes=RING_BYTES)
        push = speedups.ring_push
        kind = KIND
        payload = bytes(size)
        start_s = time.perf_counter()
        left = frames
        while left:
            result = push(memory, offset, kind, payload)
            if result:
                left -= 1
                if result == 2:
                    ring_doorbell(peer.out_bell_fd)
    else:
        offset = ring_offset(1 - me, me, worker_count=2, ring_bytes=RING_BYTES)
        pop = speedups.ring_pop
        out: list[Frame] = []
        left = frames
        while not pop(memory, offset, out, limits.LINK_BATCH_FRAMES_MAX, limits.LINK_BATCH_BYTES_MAX)[0]:
            pass
        start_s = time.perf_counter()
        left -= len(out)
        while left > 0:
            out.clear()
            left -= pop(memory, offset, out, limits.LINK_BATCH_FRAMES_MAX, limits.LINK_BATCH_BYTES_MAX)[0]
    elapsed = time.perf_counter() - start_s
    cpu_s = time.process_time() - start_cpu_s
    mesh.links.clear()
    mesh.close()
    results.send((elapsed, cpu_s))


def run_once(mode: str, frames: int, size: int) -> tuple[float, float]:
    """(frames/s seen by the consumer from first frame to last, frames per CPU second of the
    busier process). The second is what the two processes could do with a core each: on a shared
    machine the first also measures the other tenants."""
    transport: Transport = "socketpair" if mode.startswith("socketpair") else "ring"
    mesh: RingMesh = create_mesh(2, transport=transport, ring_bytes=RING_BYTES)
    context = multiprocessing.get_context("fork")
    try:
        children = []
        pipes = []
        for index, role in ((1, "consumer"), (0, "producer")):
            receiver, sender = context.Pipe(duplex=False)
            target: Callable[..., None]
            args: tuple[object, ...]
            if mode == "ring-raw":
                target, args = raw_role, (mesh.spec_for(index), role, frames, size, sender)
            else:
                target = link_role
                args = (mesh.spec_for(index), role, frames, size, mode == "ring-link-batch", sender)
            child = context.Process(target=target, args=args)
            child.start()
            children.append(child)
            pipes.append(receiver)
        (consumer_s, consumer_cpu_s), (_producer_s, producer_cpu_s) = [pipe.recv() for pipe in pipes]
        for child in children:
            child.join(timeout=120)
            assert child.exitcode == 0, f"{mode}: a benchmark process failed"
        return frames / consumer_s, frames / max(consumer_cpu_s, producer_cpu_s)
    finally:
        mesh.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=128, help="payload bytes per frame")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    options = parser.parse_args()
    if not native.ENABLED:
        options.modes = [mode for mode in options.modes if not mode.startswith("ring")]
        print("appliance._native not in use: ring modes skipped", file=sys.stderr)
    print(f"# {options.frames} frames of {options.size} B, ring {RING_BYTES} B, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f}")
    medians: dict[str, float] = {}
    print(f"{'mode':16} {'wall M frames/s':>16} {'cpu-bound M/s':>14}  runs (wall/cpu-bound)")
    for mode in options.modes:
        runs = [run_once(mode, options.frames, options.size) for _ in range(options.repeat)]
        medians[mode] = statistics.median(wall for wall, _ in runs)
        cpu_bound = statistics.median(cpu for _, cpu in runs)
        listed = " ".join(f"{wall / 1e6:.2f}/{cpu / 1e6:.2f}" for wall, cpu in runs)
        print(f"{mode:16} {medians[mode] / 1e6:16.2f} {cpu_bound / 1e6:14.2f}  {listed}")
    if "socketpair-link" in medians:
        base = medians["socketpair-link"]
        for mode, rate in medians.items():
            print(f"{mode:16} x{rate / base:5.1f} wall rate vs socketpair-link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
