"""The one place that knows whether appliance._native (built from native/) is in use.

Each call site binds its implementation once at import, from `speedups` when ENABLED, else from
its pure-Python twin or fallback. Set APPLIANCE_NO_NATIVE=1 to force the fallbacks.
"""

import os
from types import ModuleType

speedups: ModuleType | None
try:
    from appliance import _native as speedups  # type: ignore[attr-defined,no-redef]
except ImportError:
    speedups = None

ENABLED = speedups is not None and os.environ.get("APPLIANCE_NO_NATIVE") != "1"
