"""The supervisor's local control socket: `appliance status` asks, the supervisor answers.

Where the socket is (the rule `appliance status` follows too):
    <run dir>/appliance-<client port>.sock
where <run dir> is $APPLIANCE_RUN_DIR when set (tests point it at a temp dir); otherwise the first
usable of /run/appliance (created when running as root; systemd's RuntimeDirectory=appliance),
$XDG_RUNTIME_DIR/appliance (created, mode 0700) and the temp dir ($TMPDIR or /tmp). The client
port is the real bound port, so `appliance status --port 4222` or `-c FILE` (its port) finds the
server; `--socket PATH` names it directly. The socket is mode 0660. Next to it the supervisor
registers itself (appliance/supervisor/registry.py), so a bare `appliance status` finds it.

Protocol: one JSON object per line. The client sends {"request": "status"}; the supervisor
answers one JSON line and closes. The server side is non-blocking and lives in the supervisor's
selector loop: a connection is bounded in size, count and time (limits.CONTROL_*), so a stuck
client cannot stall the supervisor, and the answer comes from the supervisor alone, so it works
while workers are wedged.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from appliance import limits
from appliance.errors import BrokenError, LimitExceeded

logger = logging.getLogger(__name__)

RUN_DIR_ENV = "APPLIANCE_RUN_DIR"
XDG_RUNTIME_DIR_ENV = "XDG_RUNTIME_DIR"
SYSTEM_RUN_DIR = Path("/run/appliance")
SOCKET_MODE = 0o660

JsonObject = dict[str, object]
Answer = Callable[[JsonObject], JsonObject]
EventHandler = Callable[[int], None]


def socket_name(port: int) -> str:
    assert 0 < port <= 65535, "the socket is named after the real bound port"
    return f"appliance-{port}.sock"


def run_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The run dirs, in the order a supervisor tries them and `appliance status` reads them."""
    env = os.environ if environ is None else environ
    if env.get(RUN_DIR_ENV):
        return [Path(env[RUN_DIR_ENV])]
    dirs = [SYSTEM_RUN_DIR]
    if env.get(XDG_RUNTIME_DIR_ENV):
        dirs.append(Path(env[XDG_RUNTIME_DIR_ENV]) / "appliance")
    return [*dirs, Path(tempfile.gettempdir())]


def server_socket_path(port: int, environ: Mapping[str, str] | None = None, *, is_root: bool | None = None) -> Path:
    """Where a supervisor serving `port` puts its control socket (creating the run dir it may own)."""
    dirs = run_dirs(environ)
    root = os.geteuid() == 0 if is_root is None else is_root
    for directory in dirs:
        if directory != dirs[-1] and (root or directory != SYSTEM_RUN_DIR):
            _make_run_dir(directory)
        if directory.is_dir() and os.access(directory, os.W_OK | os.X_OK):
            return directory / socket_name(port)
    return dirs[-1] / socket_name(port)


def _make_run_dir(directory: Path) -> None:
    """Create a run dir whose parent exists (/run, $XDG_RUNTIME_DIR, $APPLIANCE_RUN_DIR's); never a tree."""
    try:
        directory.mkdir(mode=0o700 if directory != SYSTEM_RUN_DIR else 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        logger.debug("run dir %s not usable: %s", directory, exc)


def find_socket_path(port: int, environ: Mapping[str, str] | None = None) -> Path:
    """Where `appliance status` looks for the supervisor of `port`: the first socket that exists."""
    candidates = [directory / socket_name(port) for directory in run_dirs(environ)]
    for path in candidates:
        if _is_socket(path):
            return path
    return candidates[-1]


def request(path: Path, message: JsonObject, *, timeout_s: float = limits.STATUS_CLIENT_TIMEOUT_S) -> JsonObject:
    """Ask the supervisor; BrokenError when it is gone, wedged past `timeout_s`, or answers garbage."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(timeout_s)
            client.connect(str(path))
            client.sendall(json.dumps(message).encode() + b"\n")
            chunks: list[bytes] = []
            while True:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise TimeoutError(f"no answer within {timeout_s:g}s")
                client.settimeout(remaining_s)
                chunk = client.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError as exc:
        raise BrokenError(f"supervisor unreachable at {path}: {exc}") from exc
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise BrokenError(f"bad answer from {path}") from exc
    if not isinstance(answer, dict):
        raise BrokenError(f"bad answer from {path}")
    return answer


@dataclass(slots=True)
class _Connection:
    sock: socket.socket
    deadline_mono_s: float
    inbound: bytearray = field(default_factory=bytearray)
    outbound: bytes = b""


class ControlServer:
    """A unix-socket server driven by the owner's selector (callbacks take the event mask)."""

    def __init__(self, path: Path, answer: Answer, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._answer = answer
        self._clock = clock
        self._connections: dict[int, _Connection] = {}
        self._selector: selectors.BaseSelector | None = None
        _remove_stale(path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(path))
            os.chmod(path, SOCKET_MODE)
            self._listener.listen(limits.CONTROL_CONNECTIONS_MAX)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)

    def register(self, selector: selectors.BaseSelector) -> None:
        self._selector = selector
        on_accept: EventHandler = lambda mask: self._accept()
        selector.register(self._listener, selectors.EVENT_READ, on_accept)

    def expire(self) -> None:
        """Close connections past their deadline (call once per loop turn)."""
        now = self._clock()
        for fd, connection in list(self._connections.items()):
            if now >= connection.deadline_mono_s:
                self._drop(fd)

    def close(self) -> None:
        for fd in list(self._connections):
            self._drop(fd)
        if self._selector is not None:
            self._selector.unregister(self._listener)
        self._listener.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self._connections) >= limits.CONTROL_CONNECTIONS_MAX:
            sock.close()
            return
        sock.setblocking(False)
        fd = sock.fileno()
        self._connections[fd] = _Connection(sock, self._clock() + limits.CONTROL_CLIENT_TIMEOUT_S)
        assert self._selector is not None
        on_event: EventHandler = lambda mask: self._on_event(fd, mask)
        self._selector.register(sock, selectors.EVENT_READ, on_event)

    def _on_event(self, fd: int, mask: int) -> None:
        connection = self._connections.get(fd)
        if connection is None:
            return
        try:
            if mask & selectors.EVENT_READ and not connection.outbound:
                self._read(connection)
            if connection.outbound:
                self._write(connection)
        except (OSError, LimitExceeded) as exc:
            logger.debug("control connection closed: %s", exc)
            self._drop(fd)

    def _read(self, connection: _Connection) -> None:
        chunk = connection.sock.recv(limits.CONTROL_REQUEST_BYTES_MAX)
        if not chunk:
            self._drop(connection.sock.fileno())
            return
        connection.inbound += chunk
        line, newline, _ = bytes(connection.inbound).partition(b"\n")
        if not newline:
            if len(connection.inbound) > limits.CONTROL_REQUEST_BYTES_MAX:
                raise LimitExceeded("control request longer than CONTROL_REQUEST_BYTES_MAX")
            return
        connection.outbound = json.dumps(self._answer_line(line)).encode() + b"\n"
        assert self._selector is not None
        self._selector.modify(connection.sock, selectors.EVENT_WRITE, self._selector.get_key(connection.sock).data)

    def _answer_line(self, line: bytes) -> JsonObject:
        try:
            message = json.loads(line)
        except ValueError:
            return {"error": "request is not JSON"}
        if not isinstance(message, dict):
            return {"error": "request is not a JSON object"}
        return self._answer(message)

    def _write(self, connection: _Connection) -> None:
        try:
            sent = connection.sock.send(connection.outbound)
        except BlockingIOError:
            return
        connection.outbound = connection.outbound[sent:]
        if not connection.outbound:
            self._drop(connection.sock.fileno())

    def _drop(self, fd: int) -> None:
        connection = self._connections.pop(fd, None)
        if connection is None:
            return
        if self._selector is not None:
            self._selector.unregister(connection.sock)
        connection.sock.close()


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def _remove_stale(path: Path) -> None:
    """Remove a socket file nobody answers on (a crashed supervisor); refuse a live one."""
    if not _is_socket(path):
        if path.exists():
            raise FileExistsError(f"{path} exists and is not a socket")
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise FileExistsError(f"another supervisor answers on {path}")
