"""Suite-wide checks: the native module is in use unless explicitly disabled."""

import os
from pathlib import Path

import pytest

from appliance import native

NATIVE_SOURCES = list((Path(__file__).resolve().parent.parent / "native").glob("*.c"))


def pytest_sessionstart(session: pytest.Session) -> None:
    if NATIVE_SOURCES and os.environ.get("APPLIANCE_NO_NATIVE") != "1":
        assert native.ENABLED, "appliance._native is not built: run `make test` (or set APPLIANCE_NO_NATIVE=1)"
