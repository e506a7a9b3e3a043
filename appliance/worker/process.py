"""The worker child process: rebuild the WorkerContext the supervisor passed, then serve.

The supervisor starts `python -m appliance.worker <bootstrap fd>` with these inherited fds:
- the bootstrap pipe (read to EOF): a pickled WorkerBootstrap (options, identity, placement,
  the numbers of the other inherited fds, the target "module:function");
- the client listener and, for worker 0, the http listener (bound and listening);
- the status table (shared memory, name already unlinked);
- the ready pipe: `ctx.on_ready()` writes one byte to it; the supervisor reads it.

Pickle is safe here: the bytes come from our own parent through a private pipe.
The worker dies with its supervisor (PR_SET_PDEATHSIG → SIGTERM, its graceful stop), so a
SIGKILLed supervisor leaves no orphan serving clients.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import logging
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

from appliance import limits
from appliance.config.options import ServerOptions
from appliance.errors import StartupError
from appliance.log import setup_logging
from appliance.supervisor.admission import attach_gate
from appliance.supervisor.status_row import attach_writer
from appliance.worker.context import WorkerContext

logger = logging.getLogger(__name__)

Target = Callable[[WorkerContext], Coroutine[object, object, int]]
PR_SET_PDEATHSIG = 1
EXIT_CRASH = 1  # the target raised
EXIT_STARTUP_FAILURE = 3  # uvicorn's STARTUP_FAILURE: the supervisor restarts it like any death


@dataclass(slots=True)
class WorkerBootstrap:
    options: ServerOptions
    target: str  # "module:function", an async function taking a WorkerContext, returning an exit code
    worker_index: int
    worker_count: int
    server_id: str
    start_wall_s: float
    supervisor_pid: int
    client_fd: int
    ready_fd: int
    http_fd: int | None = None
    cluster_fd: int | None = None  # the route listener (worker 0)
    websocket_fd: int | None = None  # the WebSocket client listener (every worker)
    status_fd: int | None = None
    core: int | None = None  # pin here when options.appliance.cpu_pinning
    numa_node: int = 0
    extra: dict[str, object] = field(default_factory=dict)  # becomes WorkerContext.extra (e.g. mesh_spec)
    extra_fds: tuple[int, ...] = ()  # further fds the extras name (the fabric mesh's shm, eventfds, sockets)

    def inherited_fds(self) -> tuple[int, ...]:
        fds = [self.client_fd, self.ready_fd]
        fds += [fd for fd in (self.http_fd, self.cluster_fd, self.websocket_fd, self.status_fd) if fd is not None]
        return (*fds, *self.extra_fds)


def encode_bootstrap(bootstrap: WorkerBootstrap) -> bytes:
    blob = pickle.dumps(bootstrap, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) <= limits.WORKER_BOOTSTRAP_BYTES_MAX, "options too large for a worker bootstrap"
    return blob


def read_bootstrap(fd: int) -> WorkerBootstrap:
    chunks: list[bytes] = []
    size = 0
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            size += len(chunk)
            if size > limits.WORKER_BOOTSTRAP_BYTES_MAX:
                raise StartupError("worker bootstrap larger than WORKER_BOOTSTRAP_BYTES_MAX")
            chunks.append(chunk)
    bootstrap = pickle.loads(b"".join(chunks))
    if not isinstance(bootstrap, WorkerBootstrap):
        raise StartupError("worker bootstrap is not a WorkerBootstrap")
    return bootstrap


def load_target(spec: str) -> Target:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise StartupError(f"worker target {spec!r} is not 'module:function'")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise StartupError(f"cannot load worker target {spec!r}: {exc}") from exc
    if not callable(target):
        raise StartupError(f"worker target {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def build_context(bootstrap: WorkerBootstrap) -> WorkerContext:
    """Sockets, status row and ready callback from the inherited descriptors."""
    client = socket.socket(fileno=bootstrap.client_fd)
    http = None if bootstrap.http_fd is None else socket.socket(fileno=bootstrap.http_fd)
    cluster = None if bootstrap.cluster_fd is None else socket.socket(fileno=bootstrap.cluster_fd)
    websocket = None if bootstrap.websocket_fd is None else socket.socket(fileno=bootstrap.websocket_fd)
    status = None
    gate = None
    if bootstrap.status_fd is not None:
        status = attach_writer(bootstrap.status_fd, bootstrap.worker_index)
        if bootstrap.worker_count > 1:  # max_connections counts the connections of every worker
            gate = attach_gate(bootstrap.status_fd, bootstrap.worker_index, limit=bootstrap.options.max_connections)
    ready_fd = bootstrap.ready_fd
    told: list[bool] = []

    def on_ready() -> None:
        if told:
            return
        told.append(True)
        try:
            os.write(ready_fd, b"R")
        except OSError as exc:  # the supervisor is gone; PDEATHSIG stops us
            logger.debug("cannot report ready: %s", exc)

    extra: dict[str, object] = {"core": bootstrap.core, "numa_node": bootstrap.numa_node,
                                "supervisor_pid": bootstrap.supervisor_pid, "status_fd": bootstrap.status_fd,
                                **bootstrap.extra}
    return WorkerContext(options=bootstrap.options, worker_index=bootstrap.worker_index,
                         worker_count=bootstrap.worker_count, server_id=bootstrap.server_id,
                         start_wall_s=bootstrap.start_wall_s, client_listener=client, http_listener=http,
                         cluster_listener=cluster, websocket_listener=websocket,
                         on_ready=on_ready, status=status, connection_gate=gate, extra=extra)


def die_with_parent(supervisor_pid: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies; exit now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc is loaded already
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != supervisor_pid:
        raise StartupError("the supervisor is gone")


def pin_to_core(core: int) -> None:
    try:
        os.sched_setaffinity(0, {core})
    except OSError as exc:
        logger.warning("cannot pin worker to core %d: %s", core, exc)


def run_target(target: Target, ctx: WorkerContext) -> int:
    """Run the target on a fresh loop (uvloop when importable); its return value is the exit code."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        code: int = runner.run(target(ctx))
    assert isinstance(code, int), f"worker target returned {code!r}, not an exit code"
    return code


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m appliance.worker <bootstrap fd>  (started by the supervisor)", file=sys.stderr)
        return 2
    for early in (signal.SIGHUP, signal.SIGUSR1):  # a reload or log reopen before serve_worker handles them
        signal.signal(early, signal.SIG_IGN)  # must not kill us
    bootstrap = read_bootstrap(int(argv[0]))
    options = bootstrap.options
    setup_logging(**options.logging_settings())
    try:
        die_with_parent(bootstrap.supervisor_pid)
        target = load_target(bootstrap.target)
    except StartupError as exc:
        logger.error("worker %d: %s", bootstrap.worker_index, exc)
        return EXIT_STARTUP_FAILURE
    if options.appliance.cpu_pinning and bootstrap.core is not None:
        pin_to_core(bootstrap.core)
    ctx = build_context(bootstrap)
    logger.debug("worker %d serving (pid %d, core %s, NUMA node %d)", bootstrap.worker_index, os.getpid(),
                 bootstrap.core, bootstrap.numa_node)
    try:
        return run_target(target, ctx)
    except Exception:  # a bug or an unhandled operating error: crash loudly; the supervisor restarts us
        logger.exception("worker %d crashed", bootstrap.worker_index)
        return EXIT_CRASH
