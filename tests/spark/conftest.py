"""One SparkSession (local[2]) and one `appliance run` with JetStream for all Spark tests.

Without pyspark (the `appliance[spark]` extra) the Spark tests are skipped with the reason; with
APPLIANCE_REQUIRE_SPARK=1 (`make test-spark`) a missing pyspark fails the run instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.testing.process import ApplianceProcess, free_port



def _have_pyspark() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


HAVE_PYSPARK = _have_pyspark()
SKIP_REASON = "pyspark is not installed (pip install '.[spark]'; `make test-spark` does it)"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("APPLIANCE_REQUIRE_SPARK") == "1" and not HAVE_PYSPARK:
        raise pytest.UsageError(f"APPLIANCE_REQUIRE_SPARK=1 but {SKIP_REASON}")


@pytest.fixture(scope="session")
def appliance_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base: Path = tmp_path_factory.mktemp("spark-appliance")
    port = free_port()
    config = base / "spark.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {base / 'store'} }}\n")
    with ApplianceProcess(["-c", str(config)], log_dir=base) as server:
        yield f"nats://127.0.0.1:{server.client_port}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import appliance.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("appliance-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    appliance.spark.register(session)
    yield session
    session.stop()
