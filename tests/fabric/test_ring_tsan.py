"""native/ring.c is free of data races: two threads under ThreadSanitizer, and TSAN has teeth."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "native"
HARNESS = Path(__file__).with_name("ring_tsan.c")
COMPILER = shutil.which("gcc") or shutil.which("cc")
TIMEOUT_S = 90.0
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1"}  # the first report ends the run


def build(tmp_path: Path, ring_source: Path, name: str) -> Path:
    assert COMPILER is not None
    binary = tmp_path / name
    subprocess.run(
        [COMPILER, "-std=c11", "-O1", "-g", "-fsanitize=thread", "-Wall", "-Wextra", "-Werror",
         f"-I{NATIVE}", "-DCOUNT=10000u", str(HARNESS), str(ring_source), "-o", str(binary), "-lpthread"],
        check=True, capture_output=True, timeout=TIMEOUT_S,
    )
    return binary


@pytest.fixture
def tsan_available(tmp_path: Path) -> None:
    if COMPILER is None:
        pytest.skip("no C compiler")
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    built = subprocess.run(
        [COMPILER, "-fsanitize=thread", str(probe), "-o", str(tmp_path / "probe")],
        capture_output=True, timeout=TIMEOUT_S, check=False,
    )
    if built.returncode != 0:
        pytest.skip("ThreadSanitizer is not available to the C compiler")


@pytest.mark.usefixtures("tsan_available")
def test_two_threads_move_every_frame_without_a_data_race(tmp_path: Path) -> None:
    binary = build(tmp_path, NATIVE / "ring.c", "ring_tsan")
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=TIMEOUT_S, env=TSAN_ENV, check=False)
    assert "ThreadSanitizer" not in run.stderr, run.stderr
    assert run.returncode == 0
    assert run.stdout.strip() == "ok 10000"


@pytest.mark.usefixtures("tsan_available")
def test_tsan_catches_a_publish_without_release(tmp_path: Path) -> None:
    """The same harness over a copy of ring.c whose head store is relaxed must be reported."""
    source = (NATIVE / "ring.c").read_text()
    release = "atomic_store_explicit(&h->head, head, memory_order_release);"
    assert source.count(release) == 1
    broken = tmp_path / "ring_relaxed.c"
    broken.write_text(source.replace(release, release.replace("release", "relaxed")))
    binary = build(tmp_path, broken, "ring_relaxed")
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=TIMEOUT_S, env=TSAN_ENV, check=False)
    assert "ThreadSanitizer: data race" in run.stderr
