"""A worker process for the two-process tests: attach to the mesh from inherited fds, echo frames.

Usage: python _mesh_worker.py SPEC_JSON. Every frame from a peer goes back to it with kind PONG
(respecting backpressure); a HELLO frame with payload b"stop" ends the process (exit 0) once
everything before it has been echoed.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque

from appliance.fabric.frames import Frame, FrameKind
from appliance.fabric.link import Link
from appliance.fabric.mesh import WorkerMeshSpec, attach_mesh


class Echo:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.backlog: dict[int, deque[Frame]] = {}
        self.stopping = False
        self.done = loop.create_future()

    def on_frames(self, link: Link, frames: list[Frame]) -> None:
        queue = self.backlog.setdefault(link.peer, deque())
        for kind, payload in frames:
            if kind == FrameKind.HELLO and payload == b"stop":
                self.stopping = True
            else:
                queue.append((FrameKind.PONG, payload))
        self.on_writable(link)

    def on_writable(self, link: Link) -> None:
        queue = self.backlog.setdefault(link.peer, deque())
        while queue and link.try_send(*queue[0]):
            queue.popleft()
        if self.stopping and not any(self.backlog.values()) and not self.done.done():
            self.done.set_result(None)

    def on_broken(self, link: Link, error: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(error)


async def main(spec: WorkerMeshSpec) -> None:
    loop = asyncio.get_running_loop()
    mesh = attach_mesh(spec)
    echo = Echo(loop)
    for link in mesh.links.values():
        link.start(loop, echo)
    await echo.done
    for link in mesh.links.values():  # let a socketpair push its last bytes out
        while not link.flush():
            await asyncio.sleep(0.001)
    mesh.close()


if __name__ == "__main__":
    asyncio.run(main(WorkerMeshSpec.from_json(sys.argv[1])))
