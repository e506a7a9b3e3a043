"""The local registry of running supervisors, so that a bare `appliance status` finds the server.

Each supervisor writes one entry next to its control socket, in the run dir of
appliance/supervisor/control.py ($APPLIANCE_RUN_DIR; else /run/appliance as root or where it is
writable, $XDG_RUNTIME_DIR/appliance, the temp dir):

    <run dir>/appliance-<client port>.json   {"pid", "server_name", "client_url", "client_port",
                                              "http_port", "cluster_port", "config_file",
                                              "control_socket", "started"}

written atomically (temp file, rename) once the control socket listens, removed at shutdown.
`appliance status` reads every entry of every run dir: an entry whose supervisor is gone (its
pid does not exist, or nobody listens on its socket: refused or missing) is stale; it is ignored
and removed (with the socket file nobody listens on). A supervisor too busy to accept is alive. Which entries are stale is decided by `live_entries` from two
injected probes, so the rule is tested without processes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from appliance.supervisor.control import run_dirs

logger = logging.getLogger(__name__)

ENTRY_GLOB = "appliance-*.json"
ENTRY_BYTES_MAX = 64 * 1024  # an entry is a few hundred bytes; anything larger is not ours
PROBE_TIMEOUT_S = 0.5
ENTRIES_MAX = 1024  # per run dir: a bound on what one `appliance status` reads


@dataclass(frozen=True, slots=True)
class Registration:
    pid: int
    server_name: str
    client_url: str
    client_port: int
    http_port: int | None
    cluster_port: int | None
    config_file: str
    control_socket: str
    started: str

    def describe(self) -> str:
        """One line of the list `appliance status` prints when several servers run."""
        ports = [f"clients {self.client_url}"]
        if self.http_port:
            ports.append(f"monitoring {self.http_port}")
        if self.cluster_port:
            ports.append(f"cluster {self.cluster_port}")
        config = f", config {self.config_file}" if self.config_file else ""
        return (f"{self.server_name}: {', '.join(ports)}, pid {self.pid}{config}, "
                f"socket {self.control_socket} (appliance status -p {self.client_port})")


def entry_path(control_socket: Path) -> Path:
    """The entry of the supervisor whose control socket is `control_socket`."""
    return control_socket.with_suffix(".json")


def register(registration: Registration) -> Path:
    """Write the entry atomically (readers never see half of it); returns its path."""
    path = entry_path(Path(registration.control_socket))
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(asdict(registration), indent=1) + "\n")
    os.chmod(scratch, 0o644)
    os.replace(scratch, path)
    return path


def unregister(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def parse_entry(text: str) -> Registration | None:
    """An entry's registration, or None when it is not one (foreign, truncated or from another version)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        registration = Registration(**data)
    except TypeError:
        return None
    if not isinstance(registration.pid, int) or not isinstance(registration.client_port, int):
        return None
    return registration


def live_entries(entries: Iterable[tuple[Path, Registration | None]], *, pid_alive: Callable[[int], bool],
                 answers: Callable[[Path], bool]) -> tuple[list[Registration], list[Path]]:
    """(live registrations sorted by client port, stale entry paths): an entry is live when its
    supervisor's pid exists and its control socket accepts a connection."""
    live: list[Registration] = []
    stale: list[Path] = []
    for path, registration in entries:
        if registration is None or not pid_alive(registration.pid) or not answers(Path(registration.control_socket)):
            stale.append(path)
        else:
            live.append(registration)
    return sorted(live, key=lambda r: (r.client_port, r.control_socket)), stale


def running(environ: Mapping[str, str] | None = None) -> list[Registration]:
    """Every supervisor registered on this host that still answers; stale entries are removed."""
    entries = list(_read_entries(run_dirs(environ)))
    live, stale = live_entries(entries, pid_alive=pid_alive, answers=socket_answers)
    by_path = dict(entries)
    for path in stale:
        _clean(path, by_path.get(path))
    return live


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True


def socket_answers(path: Path) -> bool:
    """False only when nobody listens on `path` (refused, gone, not a socket); a listener too busy
    to accept within PROBE_TIMEOUT_S is alive (`appliance status` then says it is unreachable)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(PROBE_TIMEOUT_S)
        probe.connect(str(path))
    except (TimeoutError, BlockingIOError):
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _read_entries(directories: Iterable[Path]) -> Iterable[tuple[Path, Registration | None]]:
    seen: set[Path] = set()
    for directory in directories:
        try:
            paths = sorted(directory.glob(ENTRY_GLOB))[:ENTRIES_MAX]
        except OSError:
            continue
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            try:
                with open(path, "rb") as entry:
                    text = entry.read(ENTRY_BYTES_MAX + 1)
            except OSError:
                continue
            yield path, None if len(text) > ENTRY_BYTES_MAX else parse_entry(text.decode("utf-8", "replace"))


def _clean(path: Path, registration: Registration | None) -> None:
    """Remove a stale entry and, when nobody answers on it, its socket; someone else's files stay."""
    try:
        path.unlink()
        if registration is not None:
            control = Path(registration.control_socket)
            if control.parent == path.parent and not socket_answers(control):
                control.unlink()
        logger.debug("removed the stale registration %s", path)
    except OSError:
        pass
