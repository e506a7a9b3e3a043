"""Three RaftGroups in one asyncio loop, each driven by run_group: they elect and commit."""

import asyncio
import random
from collections.abc import Sequence

from appliance.clock import SystemClock
from appliance.cluster.group import RaftGroup
from appliance.cluster.runner import run_group
from appliance.raft.storage import MemoryStorage
from appliance.raft.types import ConfState, Entry, Message, RaftConfig

VOTERS = ("a", "b", "c")


class LoopTransport:
    def __init__(self) -> None:
        self.groups: dict[str, RaftGroup] = {}
        self.wakes: dict[str, asyncio.Event] = {}

    def send(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.groups[message.to].step(message)
            self.wakes[message.to].set()


class Log:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def apply(self, entries: Sequence[Entry]) -> None:
        self.data.extend(e.data for e in entries if e.data)

    def applied_index(self) -> int:
        return 0  # in memory only: rebuilt from the raft snapshot and log after a restart

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        self.data = []


async def wait_for(condition: object, deadline_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():  # type: ignore[operator]
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.01)


def test_groups_driven_by_asyncio_elect_and_commit() -> None:
    async def scenario() -> None:
        transport, stop = LoopTransport(), asyncio.Event()
        logs = {name: Log() for name in VOTERS}
        for name in VOTERS:
            transport.groups[name] = RaftGroup(
                group_id="g", config=RaftConfig(id=name), storage=MemoryStorage(ConfState(VOTERS)),
                transport=transport, state_machine=logs[name], clock=SystemClock(), rng=random.Random(name),
                tick_s=0.01)
            transport.wakes[name] = asyncio.Event()
        tasks = [asyncio.create_task(run_group(transport.groups[n], wake=transport.wakes[n], stop=stop))
                 for n in VOTERS]
        await wait_for(lambda: any(g.is_leader() for g in transport.groups.values()))
        leader = next(name for name, g in transport.groups.items() if g.is_leader())
        acked: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        transport.groups[leader].propose(b"hello", lambda ok, index: acked.set_result(index) if ok else None)
        transport.wakes[leader].set()
        await asyncio.wait_for(acked, timeout=20)
        await wait_for(lambda: all(log.data == [b"hello"] for log in logs.values()))
        stop.set()
        for name in VOTERS:
            transport.wakes[name].set()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
