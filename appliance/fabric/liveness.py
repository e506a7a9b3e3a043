"""Is a sibling worker's process alive? The only fact that lets a worker stop waiting for it.

`PidfdLiveness` watches each sibling's pid with a pidfd (Linux >= 5.3) registered with the event
loop: the fd turns readable the moment the process exits (a zombie counts as exited), so the fabric
hears of a death at once, not at a timeout. `alive(pid)` answers the same question synchronously
(signal 0, then the zombie state in /proc), for the fabric's timer and for kernels without pidfds.
Tests use appliance/testing/sim_liveness.py instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

from appliance.fabric.link import LinkLoop

logger = logging.getLogger(__name__)

OnExit = Callable[[int], None]


class Liveness(Protocol):
    def watch(self, pid: int, on_exit: OnExit) -> None:
        """Call on_exit(pid) once when `pid` exits (at once, on the loop, if it already has)."""
        ...

    def alive(self, pid: int) -> bool: ...

    def close(self) -> None: ...


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return True  # no /proc: signal 0 is all we know
    return not fields or fields[0] not in (b"Z", b"X")


class PidfdLiveness:
    def __init__(self, loop: LinkLoop) -> None:
        self._loop = loop
        self._watched: dict[int, tuple[int, OnExit]] = {}  # pid -> (pidfd, callback)
        self._closed = False

    def watch(self, pid: int, on_exit: OnExit) -> None:
        if self._closed or pid in self._watched or pid == os.getpid():
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._loop.call_soon(lambda: on_exit(pid))
            return
        except OSError as error:  # no pidfds here: the fabric's timer asks alive() instead
            logger.debug("cannot watch worker pid %d: %s", pid, error)
            return
        self._watched[pid] = (fd, on_exit)
        self._loop.add_reader(fd, lambda: self._exited(pid))

    def _exited(self, pid: int) -> None:
        watched = self._watched.pop(pid, None)
        if watched is None:
            return
        fd, on_exit = watched
        self._loop.remove_reader(fd)
        os.close(fd)
        on_exit(pid)

    def alive(self, pid: int) -> bool:
        return process_alive(pid)

    def close(self) -> None:
        self._closed = True
        for fd, _ in self._watched.values():
            self._loop.remove_reader(fd)
            os.close(fd)
        self._watched.clear()
