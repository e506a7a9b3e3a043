"""benchmarks/workers.py reports a rate only for a run in which every message arrived."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from appliance.testing.natsserver import NatsServer

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "workers.py"


@pytest.fixture(scope="module")
def workers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_workers_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # multiprocessing pickles its functions by module name
    spec.loader.exec_module(module)
    return module


def test_a_rate_needs_every_message(workers: ModuleType) -> None:
    assert workers.arrived_rate(10 * 150, 150, 10, 0.5) == 20.0
    with pytest.raises(workers.Incomplete, match="9 of 10 messages arrived"):
        workers.arrived_rate(9 * 150 + 20, 150, 10, 0.5)
    with pytest.raises(workers.Incomplete, match="0 of 10 messages arrived"):
        workers.arrived_rate(0, 150, 10, 0.0)
    with pytest.raises(workers.Incomplete, match="11 of 10"):
        workers.arrived_rate(11 * 150, 150, 10, 0.5)


def test_a_complete_run_against_nats_server_reports_its_rate(workers: ModuleType) -> None:
    with NatsServer() as real:
        rate, _ = workers.pubsub(real.port, pub_worker=None, sub_worker=None, workers=1, msgs=2000, size=128,
                                 server_pids=[])
    assert rate > 0
