"""The hardened unit still lets the server work: `appliance run` (JetStream, 2 pinned workers, monitoring,
/metrics, a publish, a reload, a stop) under strace, every system call and socket family it makes
checked against the unit's SystemCallFilter= and RestrictAddressFamilies=, and no W^X mapping
(MemoryDenyWriteExecute=). What needs systemd as PID 1 (namespaces, ProtectSystem=) is not run here."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from appliance.cli.service_unit import render_unit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
STRACE = shutil.which("strace")
ANALYZE = shutil.which("systemd-analyze")
Start = Callable[..., Any]


def _strace_works() -> bool:
    if STRACE is None:
        return False
    return subprocess.run([STRACE, "-qq", "-o", "/dev/null", "true"], capture_output=True, timeout=30).returncode == 0


needs_tools = pytest.mark.skipif(ANALYZE is None or not _strace_works(),
                                 reason="needs strace (with ptrace allowed) and systemd-analyze")


def syscall_groups() -> dict[str, list[str]]:
    assert ANALYZE is not None
    out = subprocess.run([ANALYZE, "syscall-filter", "--no-pager"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def expand(name: str, groups: dict[str, list[str]], seen: set[str] | None = None) -> set[str]:
    if not name.startswith("@"):
        return {name}
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    return set().union(*(expand(member, groups, seen) for member in groups.get(name, [])))


def allowed_syscalls(unit: str) -> set[str]:
    """systemd's rule: the first SystemCallFilter= line is the allow list; later `~` lines remove, others add."""
    groups = syscall_groups()
    allowed: set[str] = set()
    lines = re.findall(r"^SystemCallFilter=(.*)$", unit, re.M)
    assert lines and not lines[0].startswith("~")
    for index, line in enumerate(lines):
        deny = line.startswith("~")
        names = set().union(*(expand(n, groups) for n in line.removeprefix("~").split()))
        allowed = allowed - names if deny else (names if index == 0 else allowed | names)
    return allowed


@needs_tools
def test_the_server_under_strace_stays_inside_the_units_sandbox(start_supervisor: Start, tmp_path: Path) -> None:
    assert STRACE is not None
    trace, pid_file = tmp_path / "trace", tmp_path / "server.pid"
    config = tmp_path / "server.conf"
    base = (f'host: 127.0.0.1\nport: -1\nhttp: "127.0.0.1:-1"\npid_file: "{pid_file}"\n'
            f'jetstream {{ store_dir: "{tmp_path / "store"}" }}\nappliance {{ workers: 2 }}\n')
    config.write_text(base)
    server = start_supervisor(command=[STRACE, "-f", "-qq", "-o", str(trace), sys.executable, "-m", "appliance",
                                       "run", "-c", str(config)])
    server.wait_log("Server is ready", timeout_s=120)
    supervisor_pid = int(pid_file.read_text())
    http_port = int(re.findall(r"Starting http monitor on 127\.0\.0\.1:(\d+)", server.log())[0])

    async def work() -> None:
        client = await nats.connect(f"nats://127.0.0.1:{server.port}", connect_timeout=10, allow_reconnect=False)
        try:
            js = client.jetstream(timeout=20)
            await js.add_stream(name="S", subjects=["s.>"])
            for index in range(20):
                await js.publish(f"s.{index}", b"x")
        finally:
            await client.close()

    asyncio.run(work())
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as response:
        assert b"appliance_client_connections" in response.read()
    config.write_text(base + "max_payload: 2MB\n")
    os.kill(supervisor_pid, signal.SIGHUP)  # the supervisor, not strace (which started it)
    server.wait_log("Reloaded server configuration", timeout_s=60)
    os.kill(supervisor_pid, signal.SIGTERM)
    assert server.wait_exit(timeout_s=120) == 0  # strace exits with its tracee's status

    text = trace.read_text(errors="replace")
    used = set(re.findall(r"^\d+ +([a-z_0-9]+)\(", text, re.M))
    assert {"sched_setaffinity", "openat", "accept4", "fdatasync"} <= used  # the trace is real: pinning, store, clients
    unit = render_unit()
    assert sorted(used - allowed_syscalls(unit)) == []
    families = set(re.findall(r"\bsocket(?:pair)?\((AF_[A-Z0-9]+)", text))
    permitted = set(re.search(r"^RestrictAddressFamilies=(.*)$", unit, re.M).group(1).split())  # type: ignore[union-attr]
    assert families and families <= permitted
    assert _no_write_exec(text)


def _no_write_exec(text: str) -> bool:
    """MemoryDenyWriteExecute=: no mapping both writable and executable, no mprotect adding execute."""
    write_exec = re.search(r"\bmmap\([^)\n]*PROT_WRITE\|PROT_EXEC", text)
    exec_later = re.search(r"\b(?:mprotect|pkey_mprotect)\([^)\n]*PROT_EXEC", text)
    return write_exec is None and exec_later is None
