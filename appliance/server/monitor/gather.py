"""One gather of sibling workers' snapshots at a time, shared by every request that waits for it.

Every monitoring request on a multi-worker host needs the siblings' snapshots, and each sibling builds
its snapshot on its own event loop, between its clients' reads. Asked once per request, 500 parallel
/varz meant 500 snapshots per sibling queued on its link (its clients and heartbeat waiting behind
them) and 500 timeouts here. Theory of operation:

- No gather in flight: the request starts one and waits for it.
- One in flight: the request joins the *following* gather, which starts when the current one ends
  and asks for the union of the parts its waiters need. It never shares the current gather: that one
  was asked before this request arrived, and could miss what a client changed just before asking.
So a burst of N requests costs two gathers, at most one request per sibling is in flight, and every
answer is at least as new as its request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Snapshots = list[dict[str, object]]
Gather = Callable[[frozenset[str]], Awaitable[Snapshots]]


class GatherCoalescer:
    def __init__(self, gather: Gather) -> None:
        self._gather = gather
        self._current: asyncio.Future[Snapshots] | None = None
        self._following: asyncio.Future[Snapshots] | None = None
        self._following_parts: set[str] = set()
        self.gathers = 0  # gathers started (for tests and the curious)

    async def gather(self, parts: frozenset[str]) -> Snapshots:
        if self._current is None:
            task = self._start(parts)
        else:
            self._following_parts |= parts
            if self._following is None:
                self._following = asyncio.ensure_future(self._follow(self._current))
            task = self._following
        return await asyncio.shield(task)

    def _start(self, parts: frozenset[str]) -> asyncio.Future[Snapshots]:
        self.gathers += 1
        task = asyncio.ensure_future(self._gather(parts))
        self._current = task
        task.add_done_callback(self._current_done)
        return task

    def _current_done(self, task: asyncio.Future[Snapshots]) -> None:
        if self._current is task:
            self._current = None

    async def _follow(self, current: asyncio.Future[Snapshots]) -> Snapshots:
        await asyncio.wait([current])
        parts = frozenset(self._following_parts)
        self._following_parts = set()
        self._following = None  # requests from now on follow the gather started here
        return await self._start(parts)
