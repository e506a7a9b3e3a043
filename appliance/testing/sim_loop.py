"""SimLoop: the part of an asyncio loop a worker's server and fabric use, run by hand on virtual time.

One SimLoop per simulated worker process: a test decides which worker runs and when (a busy or
descheduled worker is one whose loop the test does not run), and moves time forward explicitly, so
timeouts fire exactly when the test says. Nothing here reads a clock or touches a socket.

`SimLiveness` is the process table of such a test: pids are alive until `exit(pid)`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

RUN_STEPS_MAX = 100_000  # callbacks one run_ready() may take: a livelock fails the test, never hangs it


class SimHandle:
    """What call_soon / call_later return: cancel() keeps the callback from running; when() is a
    timer's due time on the loop's clock (asyncio.TimerHandle's)."""

    __slots__ = ("_callback", "_args", "cancelled", "_when")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], when: float = 0.0) -> None:
        self._callback = callback
        self._args = args
        self.cancelled = False
        self._when = when

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        if not self.cancelled:
            self._callback(*self._args)


class SimLoop:
    def __init__(self, name: str = "worker") -> None:
        self.name = name
        self.now = 0.0
        self._ready: deque[SimHandle] = deque()
        self._timers: list[tuple[float, int, SimHandle]] = []
        self._order = itertools.count()
        self.readers: dict[int, Callable[[], object]] = {}
        self.writers: dict[int, Callable[[], object]] = {}

    # --- the asyncio surface ---------------------------------------------------------------------

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Callable[..., object], *args: Any) -> SimHandle:
        handle = SimHandle(callback, args)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> SimHandle:
        due = self.now + max(delay, 0.0)
        handle = SimHandle(callback, args, due)
        heapq.heappush(self._timers, (due, next(self._order), handle))
        return handle

    def add_reader(self, fd: int, callback: Callable[[], object], /) -> None:
        self.readers[fd] = callback

    def remove_reader(self, fd: int, /) -> bool:
        return self.readers.pop(fd, None) is not None

    def add_writer(self, fd: int, callback: Callable[[], object], /) -> None:
        self.writers[fd] = callback

    def remove_writer(self, fd: int, /) -> bool:
        return self.writers.pop(fd, None) is not None

    # --- driving it ------------------------------------------------------------------------------

    def run_ready(self) -> int:
        """Run callbacks until none is ready (those they schedule included); returns how many ran."""
        ran = 0
        while self._ready:
            assert ran < RUN_STEPS_MAX, f"{self.name}: more than {RUN_STEPS_MAX} callbacks without rest"
            self._ready.popleft().run()
            ran += 1
        return ran

    def run_one(self) -> bool:
        """Run the next ready callback, if any."""
        if not self._ready:
            return False
        self._ready.popleft().run()
        return True

    def advance(self, seconds: float) -> None:
        """Move virtual time forward, running each timer that falls due (and what it schedules)."""
        until = self.now + seconds
        self.run_ready()
        while self._timers and self._timers[0][0] <= until:
            when, _, handle = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            handle.run()
            self.run_ready()
        self.now = until

    @property
    def idle(self) -> bool:
        return not self._ready


class SimLiveness:
    """A process table for simulated workers: every pid is alive until exit(pid)."""

    def __init__(self) -> None:
        self.dead: set[int] = set()
        self._watchers: list[tuple[int, SimLoop, Callable[[int], None]]] = []

    def for_loop(self, loop: SimLoop) -> LoopLiveness:
        """The view one worker (running on `loop`) has: exits reach it as callbacks on its loop."""
        return LoopLiveness(self, loop)

    def exit(self, pid: int) -> None:
        """The process dies: every watcher hears of it on its own loop."""
        self.dead.add(pid)
        watchers, self._watchers = self._watchers, []
        for watched, loop, on_exit in watchers:
            if watched == pid:
                loop.call_soon(on_exit, pid)
            else:
                self._watchers.append((watched, loop, on_exit))

    def _watch(self, pid: int, loop: SimLoop, on_exit: Callable[[int], None]) -> None:
        if pid in self.dead:
            loop.call_soon(on_exit, pid)
        else:
            self._watchers.append((pid, loop, on_exit))


class LoopLiveness:
    def __init__(self, table: SimLiveness, loop: SimLoop) -> None:
        self._table = table
        self._loop = loop

    def watch(self, pid: int, on_exit: Callable[[int], None]) -> None:
        self._table._watch(pid, self._loop, on_exit)

    def alive(self, pid: int) -> bool:
        return pid not in self._table.dead

    def close(self) -> None:
        self._table._watchers = [w for w in self._table._watchers if w[1] is not self._loop]
