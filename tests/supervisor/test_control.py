"""The control socket: where it lives, and a bounded non-blocking server in the owner's selector."""

from __future__ import annotations

import json
import selectors
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance import limits
from appliance.errors import BrokenError
from appliance.supervisor.control import (
    RUN_DIR_ENV,
    SYSTEM_RUN_DIR,
    ControlServer,
    JsonObject,
    find_socket_path,
    request,
    server_socket_path,
)


class Loop:
    """The supervisor's selector loop, turned by hand."""

    def __init__(self, path: Path) -> None:
        self.now_s = 0.0
        self.selector = selectors.DefaultSelector()
        self.requests: list[JsonObject] = []
        self.server = ControlServer(path, self.answer, clock=lambda: self.now_s)
        self.server.register(self.selector)

    def answer(self, message: JsonObject) -> JsonObject:
        self.requests.append(message)
        return {"health": "ok", "echo": message}

    def turn(self, turns: int = 5) -> None:
        for _ in range(turns):
            for key, mask in self.selector.select(0.01):
                key.data(mask)
            self.server.expire()

    def close(self) -> None:
        self.server.close()
        self.selector.close()


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    running = Loop(tmp_path / "appliance-4222.sock")
    yield running
    running.close()


def connect(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    client.settimeout(5.0)
    return client


def read_all(client: socket.socket) -> bytes:
    chunks = []
    while chunk := client.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_path_rule_uses_the_env_dir_first(tmp_path: Path) -> None:
    env = {RUN_DIR_ENV: str(tmp_path)}
    assert server_socket_path(4222, env) == tmp_path / "appliance-4222.sock"
    assert find_socket_path(4222, env) == tmp_path / "appliance-4222.sock"


def test_path_rule_without_env_is_run_dir_or_temp_dir() -> None:
    path = server_socket_path(4222, {}, is_root=False)  # as root it would create /run/appliance on the host
    assert path.name == "appliance-4222.sock"
    assert path.parent in (SYSTEM_RUN_DIR, Path(tempfile.gettempdir()))


def test_a_request_is_answered_with_one_json_line_then_closed(loop: Loop) -> None:
    client = connect(loop.server.path)
    client.sendall(b'{"request": "status"}\n')
    loop.turn()
    assert json.loads(read_all(client)) == {"health": "ok", "echo": {"request": "status"}}
    client.close()


def test_a_request_split_over_writes_is_reassembled(loop: Loop) -> None:
    client = connect(loop.server.path)
    client.sendall(b'{"request": ')
    loop.turn()
    client.sendall(b'"status"}\n')
    loop.turn()
    assert json.loads(read_all(client))["echo"] == {"request": "status"}
    client.close()


@pytest.mark.parametrize(("line", "error"), [(b"not json\n", "request is not JSON"),
                                             (b"[1, 2]\n", "request is not a JSON object")])
def test_garbage_gets_an_error_answer(loop: Loop, line: bytes, error: str) -> None:
    client = connect(loop.server.path)
    client.sendall(line)
    loop.turn()
    assert json.loads(read_all(client)) == {"error": error}
    assert loop.requests == []
    client.close()


def test_an_oversized_request_is_dropped(loop: Loop) -> None:
    client = connect(loop.server.path)
    client.sendall(b"x" * (limits.CONTROL_REQUEST_BYTES_MAX + 10))
    loop.turn(20)
    assert read_all(client) == b""
    client.close()


def test_a_silent_client_is_closed_at_its_deadline(loop: Loop) -> None:
    client = connect(loop.server.path)
    loop.turn()
    loop.now_s += limits.CONTROL_CLIENT_TIMEOUT_S
    loop.turn()
    assert read_all(client) == b""
    client.close()


def test_connections_beyond_the_limit_are_closed_at_once(loop: Loop) -> None:
    clients = [connect(loop.server.path) for _ in range(limits.CONTROL_CONNECTIONS_MAX + 1)]
    loop.turn(limits.CONTROL_CONNECTIONS_MAX + 5)
    assert read_all(clients[-1]) == b""
    clients[0].sendall(b'{"request": "status"}\n')
    loop.turn()
    assert json.loads(read_all(clients[0]))["health"] == "ok"
    for client in clients:
        client.close()


def test_a_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "appliance-4222.sock"
    crashed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    crashed.bind(str(path))
    crashed.close()  # the file stays, as after a SIGKILL
    running = Loop(path)
    client = connect(path)
    client.sendall(b'{"request": "status"}\n')
    running.turn()
    assert json.loads(read_all(client))["health"] == "ok"
    client.close()
    running.close()
    assert not path.exists()


def test_a_live_supervisor_on_the_same_path_is_not_replaced(loop: Loop) -> None:
    with pytest.raises(FileExistsError):
        ControlServer(loop.server.path, loop.answer)


def test_client_request_against_nothing_is_broken(tmp_path: Path) -> None:
    with pytest.raises(BrokenError, match="supervisor unreachable"):
        request(tmp_path / "nothing.sock", {"request": "status"}, timeout_s=1.0)


def test_client_request_gets_garbage_as_broken(tmp_path: Path) -> None:
    path = tmp_path / "garbage.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def answer_garbage() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"<html>")

    thread = threading.Thread(target=answer_garbage)
    thread.start()
    try:
        with pytest.raises(BrokenError, match="bad answer"):
            request(path, {"request": "status"}, timeout_s=5.0)
    finally:
        thread.join(timeout=5.0)
        server.close()


def test_client_request_to_a_silent_server_times_out_as_broken(tmp_path: Path) -> None:
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()  # never accepts: the connection sits in the backlog, as with a SIGSTOPped supervisor
        with pytest.raises(BrokenError, match="supervisor unreachable"):
            request(path, {"request": "status"}, timeout_s=0.2)
