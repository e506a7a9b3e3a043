"""The registry of local supervisors: entries, the stale rule, and where a supervisor registers."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from appliance.supervisor.control import SYSTEM_RUN_DIR, run_dirs, server_socket_path
from appliance.supervisor.registry import (
    Registration,
    entry_path,
    live_entries,
    parse_entry,
    register,
    socket_answers,
    unregister,
)


def registration(port: int, socket_dir: Path, *, pid: int = 4242) -> Registration:
    return Registration(pid=pid, server_name=f"n-{port}", client_url=f"0.0.0.0:{port}", client_port=port,
                        http_port=8222 if port == 4333 else None, cluster_port=None, config_file="/etc/my.conf",
                        control_socket=str(socket_dir / f"appliance-{port}.sock"), started="2026-11-27T15:00:00Z")


def test_an_entry_is_written_whole_next_to_its_socket_and_read_back(tmp_path: Path) -> None:
    reg = registration(4333, tmp_path)
    path = register(reg)
    assert path == tmp_path / "appliance-4333.json" == entry_path(Path(reg.control_socket))
    assert parse_entry(path.read_text()) == reg
    assert [p.name for p in tmp_path.iterdir()] == ["appliance-4333.json"]  # no scratch file left
    unregister(path)
    unregister(path)  # twice is fine
    assert not path.exists()


def test_garbage_entries_are_not_registrations() -> None:
    for text in ("", "{", "[]", "null", '{"pid": 1}', json.dumps({"pid": "1", "client_port": 4222, "server_name": "x",
                                                                     "client_url": "", "http_port": None,
                                                                     "cluster_port": None, "config_file": "",
                                                                     "control_socket": "", "started": ""})):
        assert parse_entry(text) is None, text


def test_entries_of_dead_or_silent_supervisors_are_stale(tmp_path: Path) -> None:
    a, b, c = registration(4333, tmp_path, pid=10), registration(4222, tmp_path, pid=11), registration(5222, tmp_path,
                                                                                                        pid=12)
    entries = [(tmp_path / "a.json", a), (tmp_path / "b.json", b), (tmp_path / "c.json", c),
               (tmp_path / "junk.json", None)]
    live, stale = live_entries(entries, pid_alive=lambda pid: pid != 11,
                               answers=lambda path: not path.name.startswith("appliance-5222"))
    assert live == [a]
    assert stale == [tmp_path / "b.json", tmp_path / "c.json", tmp_path / "junk.json"]


def test_the_line_that_lists_a_server_says_how_to_choose_it(tmp_path: Path) -> None:
    text = registration(4333, tmp_path).describe()
    assert text.startswith("n-4333: clients 0.0.0.0:4333, monitoring 8222, pid 4242, config /etc/my.conf")
    assert text.endswith("(appliance status -p 4333)")


def test_the_env_dir_overrides_every_other_run_dir(tmp_path: Path) -> None:
    env = {"APPLIANCE_RUN_DIR": str(tmp_path), "XDG_RUNTIME_DIR": "/nonexistent"}
    assert run_dirs(env) == [tmp_path]
    assert server_socket_path(4222, env, is_root=True) == tmp_path / "appliance-4222.sock"


def test_a_user_registers_under_xdg_runtime_dir_and_root_under_run(tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert run_dirs(env)[:2] == [SYSTEM_RUN_DIR, tmp_path / "appliance"]
    path = server_socket_path(4333, env, is_root=False)
    if SYSTEM_RUN_DIR.is_dir() and os.access(SYSTEM_RUN_DIR, os.W_OK):
        assert path == SYSTEM_RUN_DIR / "appliance-4333.sock"  # systemd's RuntimeDirectory= made it ours
    else:
        assert path == tmp_path / "appliance" / "appliance-4333.sock"
        assert (tmp_path / "appliance").stat().st_mode & 0o777 == 0o700


def test_only_a_socket_nobody_listens_on_is_dead(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    assert not socket_answers(path)  # missing
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(path))
        assert not socket_answers(path)  # bound, not listening: refused
        bound.listen(1)
        assert socket_answers(path)
