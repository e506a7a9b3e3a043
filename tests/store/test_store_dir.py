"""An unusable JetStream store dir is found before the server starts, in nats-server's words."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.store.store_dir import store_dir_problem
from appliance.testing.natsserver import nats_server_binary
from appliance.testing.process import free_port


def test_a_missing_dir_is_created_and_an_existing_one_is_fine(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert store_dir_problem(str(target)) is None
    assert target.is_dir() and list(target.iterdir()) == []  # the probe file is gone
    assert store_dir_problem(str(target)) is None


def test_a_file_or_a_path_through_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert store_dir_problem(str(tmp_path / "file")) == "storage directory is not a directory"
    assert store_dir_problem(str(tmp_path / "file" / "jetstream")) == "storage directory is not a directory"


def test_a_dir_that_cannot_be_created_says_why() -> None:
    assert store_dir_problem("/proc/appliance-no-such/x") == (
        "could not create storage directory - No such file or directory (ENOENT)")


def test_a_full_disk_at_start_is_not_writable(tmp_path: Path) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert store_dir_problem(str(tmp_path), write=full) == (
        "storage directory is not writable - No space left on device (ENOSPC)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0555 directory")
def test_a_read_only_dir_is_not_writable(tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        assert store_dir_problem(str(tmp_path)).startswith("storage directory is not writable - ")  # type: ignore[union-attr]
    finally:
        tmp_path.chmod(0o755)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["file", "file/below"])
def test_appliance_exits_at_once_like_nats_server_when_the_store_dir_is_a_file(tmp_path: Path, name: str) -> None:
    (tmp_path / "file").write_text("not a directory")
    store = str(tmp_path / name)
    real = subprocess.run([nats_server_binary(), "-a", "127.0.0.1", "-p", str(free_port()), "-js", "-sd", store],
                          capture_output=True, text=True, timeout=30, check=False)
    assert real.returncode == 1
    assert "Can't start JetStream: storage directory is not a directory" in real.stderr
    started = time.monotonic()
    ours = subprocess.run([sys.executable, "-m", "appliance", "run", "-a", "127.0.0.1", "-p", str(free_port()), "-js",
                           "-sd", store], capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path)
    assert ours.returncode == 1, ours.stderr
    assert time.monotonic() - started < 10  # no worker restart loop
    assert f"[FTL] Can't start JetStream: storage directory is not a directory: {store}" in ours.stderr
    assert "Server is ready" not in ours.stderr and "Listening for client connections" not in ours.stderr
