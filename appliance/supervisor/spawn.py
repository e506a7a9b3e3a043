"""Starting one worker process: inherited fds, the bootstrap pipe, the ready pipe, its pidfd.

The worker runs in its own process group so a terminal's Ctrl-C reaches the supervisor only;
the supervisor then stops the workers in its own order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from appliance.errors import StartupError
from appliance.worker.process import WorkerBootstrap, encode_bootstrap


@dataclass(slots=True)
class SpawnedWorker:
    process: subprocess.Popen[bytes]
    ready_fd: int  # read end: one byte when the worker serves; EOF when it exits
    pidfd: int | None  # readable when the process exits (None: kernel without pidfd_open)

    @property
    def pid(self) -> int:
        return self.process.pid

    def close_fds(self) -> None:
        for fd in (self.ready_fd, self.pidfd):
            if fd is not None:
                os.close(fd)


def worker_command(bootstrap_fd: int) -> list[str]:
    """`-P`: the worker's sys.path does not start with the directory the server was started in, so a
    file there named like a module (`http.py`, `asyncio.py`, an `appliance/` directory) is never
    imported in its place (nor run in the server by whoever can write to that directory)."""
    return [sys.executable, "-P", "-m", "appliance.worker", str(bootstrap_fd)]


def spawn_worker(bootstrap: WorkerBootstrap) -> SpawnedWorker:
    """Start the process and hand it its bootstrap; StartupError when that fails.

    `bootstrap.ready_fd` is filled in here (the child's end of the ready pipe).
    """
    boot_read, boot_write = os.pipe()
    ready_read, ready_write = os.pipe()
    bootstrap.ready_fd = ready_write
    try:
        blob = encode_bootstrap(bootstrap)
        process = subprocess.Popen(
            worker_command(boot_read), pass_fds=(boot_read, *bootstrap.inherited_fds()),
            stdin=subprocess.DEVNULL, process_group=0,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        for fd in (boot_read, boot_write, ready_read, ready_write):
            os.close(fd)
        raise StartupError(f"cannot start worker {bootstrap.worker_index}: {exc}") from exc
    os.close(boot_read)
    os.close(ready_write)
    os.set_blocking(ready_read, False)
    try:
        _write_all(boot_write, blob)
    except OSError:
        pass  # the child died before reading; reaping it reports the failure
    finally:
        os.close(boot_write)
    return SpawnedWorker(process=process, ready_fd=ready_read, pidfd=_pidfd(process.pid))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
