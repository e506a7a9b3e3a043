"""The Link interface: one worker's end of a bidirectional local link to a sibling worker.

Every implementation (ring.py over shared memory, socketpair.py without native code, sim.py for
deterministic tests) keeps the same contract:

- `try_send(kind, payload) -> bool` never blocks and never drops: False means the link is full
  (backpressure); nothing was sent and the caller keeps the frame. A payload larger than
  `frame_bytes_max` raises LimitExceeded. Frames arrive in the order they were accepted.
- A link is full exactly when the shared-memory ring of the same capacity would be full
  (`frames.RingSpace`): every implementation accepts and refuses the same frames.
- Two ways to consume. Synchronously, `receive(frames_max)` returns what is there now (maybe
  nothing) in one bounded batch. Driven by a loop, `start(loop, handler)` registers the link's fds
  with the loop; the handler then gets `on_frames(link, batch)` with batches bounded by
  LINK_BATCH_FRAMES_MAX and LINK_BATCH_BYTES_MAX (one turn per batch, so a busy link cannot starve
  the loop), `on_writable(link)` once after a `try_send` returned False, when a frame of the
  maximum size fits again (a paused producer resumes with room for a quarter of the link, not
  one frame at a time), and `on_broken(link, error)` when the peer went away (socketpair: its end closed).
- `flush()` moves buffered bytes toward the peer without blocking (a started link does it by
  itself at the end of the loop turn); it returns True when nothing stays buffered.
- `close()` unregisters from the loop; later calls to try_send raise ClosedError.
- A started link contains what its handler raises (`handler_failed`): the failure is logged (once
  per kind, then counted), the batch that failed is the handler's loss, and the link goes on
  draining. An exception never leaves a link into the event loop, where nobody would reschedule
  the drain and the link would stop for good (a ring whose reader never sleeps is never rung).

Frames handed to `on_frames` or returned by `receive` are owned by the caller (immutable bytes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from appliance.fabric.frames import Frame
from appliance.log import ContainedErrors

Payload = bytes | bytearray | memoryview
HANDLER_ERRORS = ContainedErrors(logging.getLogger("appliance.fabric"))


def handler_failed(what: str, peer: int, error: Exception) -> None:
    """A link's handler raised from `what` (on_frames, on_writable, on_broken) for the link to `peer`."""
    HANDLER_ERRORS.contain(f"link handler {what} (link to worker {peer})", error)


class Scheduler(Protocol):
    """The part of an event loop a simulated link needs (asyncio loops qualify)."""

    def call_soon(self, callback: Callable[[], object], /) -> object: ...


class LinkLoop(Scheduler, Protocol):
    """The part of an asyncio event loop a link with file descriptors needs."""

    def add_reader(self, fd: int, callback: Callable[[], object], /) -> None: ...

    def remove_reader(self, fd: int, /) -> bool: ...

    def add_writer(self, fd: int, callback: Callable[[], object], /) -> None: ...

    def remove_writer(self, fd: int, /) -> bool: ...


class LinkHandler(Protocol):
    """What a started link calls; the router of a worker implements it."""

    def on_frames(self, link: Link, frames: list[Frame]) -> None: ...

    def on_writable(self, link: Link) -> None: ...

    def on_broken(self, link: Link, error: Exception) -> None: ...


class Link(Protocol):
    @property
    def peer(self) -> int:
        """Index of the worker at the other end."""
        ...

    @property
    def frame_bytes_max(self) -> int: ...

    def try_send(self, kind: int, payload: Payload) -> bool: ...

    def receive(self, frames_max: int = ...) -> list[Frame]: ...

    def flush(self) -> bool: ...

    def start(self, loop: LinkLoop, handler: LinkHandler) -> None: ...

    def incoming_waiting(self) -> bool:
        """Frames from the peer are in the link, not yet taken (for the worker's DrainWatch)."""
        ...

    def pause_receiving(self) -> None:
        """A started link stops calling on_frames (frames stay in the link; it fills up)."""
        ...

    def resume_receiving(self) -> None: ...

    def close(self) -> None: ...
