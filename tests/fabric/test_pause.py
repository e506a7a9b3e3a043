"""Pausing a started link's receiving side: the link fills, the sender feels it, nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from appliance import native
from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.mesh import attach_mesh, create_mesh
from appliance.fabric.sim import sim_link_pair

DEADLINE_S = 20.0
TRANSPORTS = [
    pytest.param("ring", marks=pytest.mark.skipif(not native.ENABLED, reason="appliance._native not in use")),
    "socketpair",
    "sim",
]


class Handler:
    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.writable = 0

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        self.frames.extend(frames)

    def on_writable(self, link: Link) -> None:
        self.writable += 1

    def on_broken(self, link: Link, error: Exception) -> None:
        raise AssertionError(f"unexpected: {error}")


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_paused_receiver_backs_up_into_the_sender_and_resumes_in_order(transport: str) -> None:
    loop = asyncio.new_event_loop()
    cleanup: list[Callable[[], None]] = []
    a: Link
    b: Link
    if transport == "sim":
        a, b = sim_link_pair(4096)
    else:
        mesh = create_mesh(2, transport=transport, ring_bytes=4096)  # type: ignore[arg-type]
        worker0, worker1 = attach_mesh(mesh.spec_for_local(0)), attach_mesh(mesh.spec_for_local(1))
        a, b = worker0.links[1], worker1.links[0]
        cleanup = [worker0.close, worker1.close, mesh.close]
    sender, receiver = Handler(), Handler()
    try:
        a.start(loop, sender)
        b.start(loop, receiver)
        b.pause_receiving()
        sent: list[Frame] = []
        for i in range(1000):
            frame = (FrameKind.MESSAGE, bytes([i % 256]) * 100)
            if not a.try_send(*frame):
                break
            sent.append(frame)
            loop.run_until_complete(turns(1))  # let a socketpair move its bytes
        assert len(sent) == 4096 // 112, "full at the ring's capacity, not later"
        loop.run_until_complete(turns(20))
        assert receiver.frames == [], "nothing is handed over while paused"
        assert sender.writable == 0
        b.resume_receiving()

        async def until_done() -> None:
            while len(receiver.frames) < len(sent) or sender.writable == 0:
                await asyncio.sleep(0)

        loop.run_until_complete(asyncio.wait_for(until_done(), DEADLINE_S))
        assert receiver.frames == sent
        assert sender.writable == 1
    finally:
        a.close()
        b.close()
        for close in cleanup:
            close()
        loop.close()
