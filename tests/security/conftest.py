from __future__ import annotations

from pathlib import Path

import pytest

from appliance.testing.certs import TestCerts


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return TestCerts(Path(tmp_path_factory.mktemp("certs")))
