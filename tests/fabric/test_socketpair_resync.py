"""The router's resync runs unchanged over a rejoined socketpair link: two workers' servers in one
loop, worker 1 dies (its fds close, nothing said on the link) and comes back with fresh socketpairs
the supervisor side of the mesh hands to worker 0. The restarted worker's HELLO makes worker 0
forget the dead one's interest and send INTEREST_RESET plus its own (server/links.py), exactly as
on a ring; messages then flow in order both ways, and nothing meant for the dead worker arrives.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import nats
import pytest

from appliance.config.options import ServerOptions
from appliance.fabric.mesh import RingMesh, WorkerMesh, attach_mesh, create_mesh
from appliance.fabric.socketpair import SocketpairLink
from appliance.server.links import LocalFabric
from appliance.server.server import Server

DEADLINE_S = 15.0
pytestmark = pytest.mark.timeout(60)


@dataclass
class Worker:
    server: Server
    fabric: LocalFabric
    mesh: WorkerMesh
    port: int

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def routes(self, subject: str) -> int:
        plain, queues = self.server.global_account().sublist.match(subject.encode())
        return len(plain) + sum(len(group) for group in queues)

    async def die(self) -> None:
        """SIGKILL: the links close first, so nothing more is said on them; then the rest goes."""
        self.mesh.close()
        for conn in list(self.server.clients.values()):
            conn.close("Server Shutdown", abort=True)
        await self.server.shutdown()
        self.fabric.close()


async def start_worker(mesh: RingMesh, index: int) -> Worker:
    """What a spawn does, in this process: fresh links after the first life, then the server."""
    mesh.prepare_spawn(index)
    worker_mesh = attach_mesh(mesh.spec_for_local(index, rejoinable=True))
    mesh.spawned(index)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    server = Server(ServerOptions(), server_id="NRESYNC", start_wall_s=0.0)
    await server.start(listener, cid_base=index * 1_000_000)
    fabric = LocalFabric(server, worker_mesh.links)
    loop = asyncio.get_running_loop()
    fabric.start(loop)
    worker_mesh.listen_for_rejoins(loop)
    return Worker(server, fabric, worker_mesh, listener.getsockname()[1])


async def until(condition: object, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_a_restarted_worker_resyncs_interest_and_messages_flow_in_order_over_the_fresh_link() -> None:
    async def scenario() -> None:
        mesh = create_mesh(2, transport="socketpair", ring_bytes=64 * 1024)
        zero = await start_worker(mesh, 0)
        first = await start_worker(mesh, 1)
        on_zero = await nats.connect(zero.url)
        on_first = await nats.connect(first.url)
        try:
            await on_zero.subscribe("zero.interest")
            await on_first.subscribe("old.interest")
            await on_zero.flush()
            await on_first.flush()
            await until(lambda: zero.routes("old.interest") == 1 and first.routes("zero.interest") == 1,
                        "interest across the workers")

            await first.die()
            for i in range(50):  # for the dead worker's interest: accepted by the detached link, never read
                await on_zero.publish("old.interest", b"stale %d" % i)
            await on_zero.flush()
            assert zero.routes("old.interest") == 1, "like a ring: the dead one's interest stays until its HELLO"

            second = await start_worker(mesh, 1)
            link = zero.mesh.links[1]
            assert isinstance(link, SocketpairLink)
            await until(lambda: link.rejoins == 1, "worker 0 took the fresh link")
            await until(lambda: zero.routes("old.interest") == 0, "worker 0 forgot the dead worker's interest")
            await until(lambda: second.routes("zero.interest") == 1, "the new worker 1 learned worker 0's interest")

            on_second = await nats.connect(second.url)
            try:
                old_again = await on_second.subscribe("old.interest")
                back = await on_zero.subscribe("back")
                await on_second.flush()
                await on_zero.flush()
                await until(lambda: zero.routes("old.interest") == 1 and second.routes("back") == 1,
                            "interest of the new worker 1")
                for i in range(200):
                    await on_zero.publish("old.interest", b"fresh %d" % i)
                    await on_second.publish("back", b"back %d" % i)
                got = [bytes((await old_again.next_msg(timeout=5)).data) for _ in range(200)]
                assert got == [b"fresh %d" % i for i in range(200)]
                got_back = [bytes((await back.next_msg(timeout=5)).data) for _ in range(200)]
                assert got_back == [b"back %d" % i for i in range(200)]
                with pytest.raises(nats.errors.TimeoutError):
                    await old_again.next_msg(timeout=0.2)  # and not one stale message after them
            finally:
                await on_second.close()
                await second.die()
        finally:
            await on_zero.close()
            await on_first.close()
            await zero.die()
            mesh.close()

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S * 3))
