"""GatherCoalescer: one gather in flight; requests arriving meanwhile share the next one, which asks
for the union of their parts and starts after they arrived."""

from __future__ import annotations

import asyncio

from appliance.server.monitor.gather import GatherCoalescer, Snapshots


def test_a_burst_costs_two_gathers_and_every_answer_is_newer_than_its_request() -> None:
    async def scenario() -> None:
        started: list[tuple[int, frozenset[str]]] = []
        release: list[asyncio.Event] = []
        clock = [0]  # the "state" of the siblings: what a gather started now would see

        async def gather(parts: frozenset[str]) -> Snapshots:
            seen = clock[0]
            started.append((seen, parts))
            event = asyncio.Event()
            release.append(event)
            await event.wait()
            return [{"seen": seen}]

        coalescer = GatherCoalescer(gather)
        first = asyncio.ensure_future(coalescer.gather(frozenset({"counters"})))
        while not started:
            await asyncio.sleep(0)
        clock[0] = 1  # a client changed something; then 50 more requests arrive
        burst = [asyncio.ensure_future(coalescer.gather(frozenset({"open"} if i % 2 else {"process"})))
                 for i in range(50)]
        await asyncio.sleep(0)
        assert len(started) == 1, "the burst does not share the gather asked before it arrived"
        release[0].set()
        assert (await first) == [{"seen": 0}]
        while len(started) < 2:
            await asyncio.sleep(0)
        assert started[1] == (1, frozenset({"open", "process"}))
        release[1].set()
        assert [await task for task in burst] == [[{"seen": 1}]] * 50
        assert coalescer.gathers == 2
        # idle again: the next request starts its own gather at once
        clock[0] = 2
        late = asyncio.ensure_future(coalescer.gather(frozenset({"counters"})))
        while len(started) < 3:
            await asyncio.sleep(0)
        release[2].set()
        assert await late == [{"seen": 2}]

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_cancelled_waiter_does_not_cancel_the_shared_gather() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()

        async def gather(parts: frozenset[str]) -> Snapshots:
            await gate.wait()
            return [{"parts": sorted(parts)}]

        coalescer = GatherCoalescer(gather)
        leaving = asyncio.ensure_future(coalescer.gather(frozenset({"a"})))
        staying = asyncio.ensure_future(coalescer.gather(frozenset({"b"})))  # follows the first
        await asyncio.sleep(0)
        leaving.cancel()  # its HTTP client went away
        gate.set()
        assert await staying == [{"parts": ["b"]}]

    asyncio.run(asyncio.wait_for(scenario(), 10))
