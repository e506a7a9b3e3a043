"""Drive a RaftGroup from an asyncio event loop (a worker): ticks from the group's clock, Readies
processed whenever a message or proposal woke it, other tasks served between two Readies.

Whatever arrives while the loop yields (proposals, messages) is batched into the next Ready.
"""

from __future__ import annotations

import asyncio

from appliance import limits
from appliance.cluster.group import RaftGroup

READIES_PER_WAKE_MAX = 64  # then yield to the loop even if more work is ready


async def run_group(group: RaftGroup, *, wake: asyncio.Event, stop: asyncio.Event) -> None:
    """Run until `stop` is set. Callers step/propose on the group, then `wake.set()`."""
    assert READIES_PER_WAKE_MAX <= limits.RAFT_PROPOSALS_PENDING_MAX
    while not stop.is_set():
        wake.clear()
        group.tick()
        for _ in range(READIES_PER_WAKE_MAX):
            if not group.process_ready():
                break
            await asyncio.sleep(0)  # let senders and proposers run; what they add joins the next Ready
        if wake.is_set():
            continue
        try:
            await asyncio.wait_for(wake.wait(), timeout=group.tick_s)
        except TimeoutError:
            pass
