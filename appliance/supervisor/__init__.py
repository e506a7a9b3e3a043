"""The supervisor process: workers, topology/NUMA, pinning, status table, control socket, sd_notify.

`run_supervisor` is loaded on first use so that light users of this package (`appliance status`
imports only `control`) do not pay for numpy and psutil.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.supervisor.supervisor import run_supervisor

__all__ = ["run_supervisor"]


def __getattr__(name: str) -> object:
    if name == "run_supervisor":
        from appliance.supervisor.supervisor import run_supervisor

        return run_supervisor
    raise AttributeError(name)
