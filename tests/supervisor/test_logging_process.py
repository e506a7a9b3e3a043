"""log_file (with logfile_size_limit), pid_file and ports_file_dir of a real `appliance run`, as nats-server."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import BrokenError
from appliance.supervisor.control import request

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
Start = Callable[..., Any]


def test_log_file_pid_file_and_ports_file(start_supervisor: Start, tmp_path: Path) -> None:
    log_file, pid_file, ports_dir = tmp_path / "server.log", tmp_path / "server.pid", tmp_path / "ports"
    ports_dir.mkdir()
    config = tmp_path / "server.conf"
    body = (f'host: 127.0.0.1\nport: -1\nhttp: "127.0.0.1:-1"\nlog_file: "{log_file}"\nlogfile_size_limit: 1000\ndebug: true\n'
            f'pid_file: "{pid_file}"\nappliance {{ workers: 2, cpu_pinning: false }}\n')
    config.write_text(body + f'ports_file_dir: "{ports_dir}"\n')
    server = start_supervisor(command=[sys.executable, "-m", "appliance", "run", "-c", str(config)])
    ports_file = ports_dir / f"appliance_{server.pid}.ports"  # nats-server: <executable>_<pid>.ports
    ports = json.loads(server.wait_for(lambda: ports_file.exists() and ports_file.read_text(), what="ports file"))
    assert set(ports) == {"nats", "monitoring"}
    client_port = int(ports["nats"][0].rsplit(":", 1)[1])
    assert ports["nats"] == [f"nats://127.0.0.1:{client_port}"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", ports["monitoring"][0])
    socket_path = server.run_dir / f"appliance-{client_port}.sock"  # the log is in the file, not the console
    workers = server.wait_for(lambda: _ready(socket_path), what="both workers ready")
    assert pid_file.read_text() == str(server.pid)

    # every process logs into the file (the console has nothing but what Python printed before logging)
    text = "".join(p.read_text() for p in sorted(tmp_path.glob("server.log*")))
    assert f"[{server.pid}] " in text and "Server is ready" in text
    assert any(f"[{worker['pid']}] " in text for worker in workers)
    assert "Rotated log, backup saved as" in text  # 1000 bytes of debug lines fill during start-up
    assert re.search(r"^\[\d+\] \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{6} \[INF\] ", text, re.M)  # logtime

    # logrotate moves the file, then sends SIGUSR1 (nats-server reopens its log file on it)
    rotated = tmp_path / "by-logrotate.log"
    log_file.rename(rotated)
    server.signal(signal.SIGUSR1)
    server.wait_for(lambda: log_file.exists() and "File log re-opened" in log_file.read_text(), what="reopened log")
    assert server.process.poll() is None

    moved = tmp_path / "ports2"
    moved.mkdir()
    config.write_text(body + f'ports_file_dir: "{moved}"\n')
    server.signal(signal.SIGHUP)
    server.wait_for(lambda: (moved / ports_file.name).exists() and not ports_file.exists(), what="ports file moved")

    server.signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert not pid_file.exists() and not (moved / ports_file.name).exists()


def _ready(socket_path: Path) -> Any:
    try:
        workers = request(socket_path, {"request": "status"}, timeout_s=5.0)["workers"]
    except (BrokenError, OSError):
        return None
    return workers if all(worker["state"] == "ready" for worker in workers) else None
