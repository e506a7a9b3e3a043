from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.testing.certs import TestCerts


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return TestCerts(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def ws_client_leftovers() -> Iterator[None]:
    """nats-py's ws:// leftovers (a refused connect leaves its aiohttp session) are collected inside
    the test, where the test's warning filters apply, not in whichever test the GC runs next."""
    yield
    gc.collect()
