"""Start `appliance run` as a real process on 127.0.0.1 for integration tests; stop only it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from appliance.bench.servers import free_port  # re-exported: the tests take it from here

__all__ = ["ApplianceProcess", "free_port"]

READY_TIMEOUT_S = 30.0


class ApplianceProcess:
    """`python -m appliance run ARGS`, stderr to a file; waits for `Server is ready`."""

    def __init__(self, args: list[str], *, log_dir: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        """`cwd`: start it there as a user would, with the `appliance` console script of this
        environment (not `python -m`, which would put that directory first on the supervisor's path)."""
        self.args = args
        self.log_path = log_dir / f"appliance-{time.monotonic_ns()}.log"
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> ApplianceProcess:
        command = [sys.executable, "-m", "appliance"]
        if self.cwd is not None:
            command = [str(Path(sys.executable).with_name("appliance"))]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([*command, "run", *self.args], stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=self.cwd, start_new_session=True)
        try:
            self.wait_log("Server is ready")
        except BaseException:
            self.stop()  # `with` never calls __exit__ when __enter__ raises: never leave it running
            raise
        bound = re.search(r"Listening for client connections on ([\d.]+):", self.log())
        if bound is None or bound.group(1) != "127.0.0.1":  # tests pass -a 127.0.0.1 or `listen`
            self.stop()
            raise AssertionError(f"a test server must listen on 127.0.0.1 only:\n{self.log()}")
        return self

    def wait_log(self, text: str, *, timeout_s: float = READY_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"appliance exited {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} after {timeout_s}s:\n{self.log()}")
            time.sleep(0.02)
        return self.log()

    @property
    def client_port(self) -> int:
        found = re.search(r"Listening for client connections on [\d.]+:(\d+)", self.log())
        assert found is not None, self.log()
        return int(found.group(1))

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout_s: float = READY_TIMEOUT_S) -> int:
        assert self.process is not None
        return self.process.wait(timeout_s)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL of the process group it leads (its workers) if it hangs."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(15)

    def __enter__(self) -> ApplianceProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.process is not None:
            self.stop()
