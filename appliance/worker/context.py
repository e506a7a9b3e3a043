"""What a worker process is given by the supervisor: the contract between supervisor/ and worker/.

The supervisor owns the listening sockets (opened once, shared by every worker), the server's
identity (one server_id per host) and the status table; a worker serves clients on them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from appliance.config.options import ServerOptions


class StatusRow(Protocol):
    """A worker's row in the supervisor's shared status table (written by the worker only)."""

    def heartbeat(self) -> None: ...

    def set_counters(
        self, *, connections: int, msgs_in: int, msgs_out: int, bytes_in: int, bytes_out: int
    ) -> None: ...

    def set_ring_fill(self, fraction: float) -> None: ...

    def set_damaged_assets(self, count: int) -> None: ...


class ConnectionGate(Protocol):
    """Server-wide max_connections shared with the sibling workers (appliance/supervisor/admission.py)."""

    def admit(self, cid: int) -> bool: ...

    def release(self, cid: int) -> None: ...


@dataclass(slots=True)
class WorkerContext:
    options: ServerOptions
    worker_index: int
    worker_count: int
    server_id: str  # one identity per host, chosen by the supervisor
    start_wall_s: float  # when the server (supervisor) started, for /varz `start`
    client_listener: socket.socket  # bound, listening, shared by all workers
    http_listener: socket.socket | None = None  # monitoring; served by worker 0 only
    cluster_listener: socket.socket | None = None  # routes; held by worker 0 only
    websocket_listener: socket.socket | None = None  # WebSocket clients, shared by all workers
    on_ready: Callable[[], None] = lambda: None  # call once, when serving
    status: StatusRow | None = None
    connection_gate: ConnectionGate | None = None  # with more than one worker
    extra: dict[str, object] = field(default_factory=dict)
