"""Chooses `scan` once at import: the C hot loop appliance.bench._loadgen, or its Python twin.

APPLIANCE_NO_NATIVE=1 forces the twin, as for appliance._native (appliance/native.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

from appliance.bench import _scan_py
from appliance.bench._scan_py import (
    FLAG_OUT_ACK,
    FLAG_OUT_ECHO,
    FLAG_STOP_ERROR,
    FLAG_STOP_STATUS,
    STOP_CLOSED,
    STOP_ERROR,
    STOP_NEED_MORE,
    STOP_OTHER,
    STOP_STATUS,
    STOP_TIMEOUT,
    ScanResult,
)

__all__ = [
    "FLAG_OUT_ACK", "FLAG_OUT_ECHO", "FLAG_STOP_ERROR", "FLAG_STOP_STATUS", "NATIVE",
    "STOP_CLOSED", "STOP_ERROR", "STOP_NEED_MORE", "STOP_OTHER", "STOP_STATUS", "STOP_TIMEOUT", "ScanResult",
    "scan",
]

_loadgen: ModuleType | None
try:
    from appliance.bench import _loadgen
except ImportError:
    _loadgen = None

NATIVE = _loadgen is not None and os.environ.get("APPLIANCE_NO_NATIVE") != "1"

scan: Callable[[bytes | bytearray, int, int, int, bytearray | None], ScanResult]
scan = _loadgen.scan if NATIVE and _loadgen is not None else _scan_py.scan
