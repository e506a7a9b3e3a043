"""The catch-up measurement (`python -m appliance.bench.catchup`): its pure parts, and one tiny real
run of the command on a 3-node appliance cluster that must finish and print its tables (no timing
or memory assertions: the numbers are a measurement, reported by hand at 1 GiB)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from appliance.bench.catchup import CatchUpResult, LagSample, _spread, lag_of, table


def test_lag_of_reads_every_replica_with_its_lag_and_zero_when_omitted() -> None:
    info = {"cluster": {"leader": "n1", "replicas": [{"name": "n2", "current": False, "lag": 7},
                                                      {"name": "n3", "current": True}]}}
    assert lag_of(info) == [("n2", False, 7), ("n3", True, 0)]
    assert lag_of({"cluster": {"leader": "n1"}}) == [] and lag_of({}) == []


def test_lag_samples_are_spread_over_the_whole_catch_up_first_and_last_kept() -> None:
    samples = [LagSample(float(i), "n1", [], {}) for i in range(100)]
    picked = _spread(samples, 8)
    assert len(picked) == 8 and picked[0].at_s == 0.0 and picked[-1].at_s == 99.0
    assert _spread(samples[:3], 8) == samples[:3]


def test_the_table_shows_each_process_peaks_and_rise_and_flags_one_over_the_bound() -> None:
    mib = 1024 * 1024
    result = CatchUpResult(stream_bytes=512 * mib, msgs=2048, fill_s=5.0, catch_up_s=10.0, leader="n1",
                           joiners=["n2", "n3"], rss_idle={"n2 worker 1": 60 * mib},
                           rss_fill={"n2 worker 1": 60 * mib}, rss_during={"n2 worker 1": 300 * mib},
                           lag=[LagSample(0.5, "n1", [("n2", False, 3)], {"n2": 100 * mib, "n3": 0})],
                           probes=[(0.5, 0.01), (1.0, None), (1.5, None), (2.0, 0.02)])
    text = "\n".join(table(result))
    assert "catch-up: 10.0s for both joiners, 51.2 MiB/s" in text
    assert "| n2 worker 1 | 60 | 60 | 300 | 240 |" in text
    assert "OVER the bound: n2 worker 1" in text
    assert "| 0.5 | n1 | n2 behind lag 3 | n2 100, n3 0 |" in text
    assert "2 of 4 acknowledged; not acknowledged from 1.0s to 1.5s" in text


@pytest.mark.integration
@pytest.mark.timeout(110)
def test_the_command_catches_up_a_tiny_stream_and_prints_its_tables() -> None:
    run = subprocess.run([sys.executable, "-m", "appliance.bench.catchup", "--mb", "4", "--msg-kib", "64",
                          "--timeout", "60"], capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "stream: 64 msgs, 4 MiB" in out
    assert "catch-up: " in out and "every process within the bound" in out
    for node in ("n1", "n2", "n3"):
        assert f"| {node} supervisor |" in out and f"| {node} worker 1 |" in out
    last_lag_row = [line for line in out.splitlines() if line.startswith("| ") and " lag " in line][-1]
    assert last_lag_row.count("current lag 0") == 2  # both joiners ended current
