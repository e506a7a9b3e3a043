"""GroupRegistry: the RAFT groups one worker owns, keyed by group id, and the seam to the network.

A worker owns any number of groups (the meta group, streams, consumers; any worker may own any
group). Their traffic leaves through one RaftTransport and arrives through `deliver`:

    out:  RaftGroup -> GroupOutbox.send(messages) -> RaftTransport.send(peer, group_id, bytes)
    in:   network -> GroupRegistry.deliver(group_id, sender, bytes) -> RaftGroup.step(message)

Messages cross the transport in the wire format of raft/codec.py, so a transport moves opaque
bytes (the routes put them on internal subjects of the system account; the simulator and the
in-memory transport of the tests queue them). A message for a group this worker does not own, or
one that does not decode, is dropped and counted: RAFT retries, and a stranger's garbage must not
reach a core.

Where the routes plug in (DESIGN §4.1; the next step): a RouteRaftTransport in cluster/ whose
`send(peer, group_id, message)` publishes `message` as an ordinary message in the system account
on an internal subject under our own prefix, one subject per (peer, group), e.g.
`$ARAFT.<peer>.<group_id>.<sender>`, never blocking (a full link drops; RAFT resends). Each worker
subscribes `$ARAFT.<own peer>.*.*` in the system account and calls
`registry.deliver(group_id, sender, payload)`. The registry ticks its groups every RAFT_TICK_S from
the worker's loop (`registry.tick()`); groups run their Ready loops on that loop (their Scheduler).
A group's traffic leaves from the worker that owns it: the registry of that worker only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from appliance import limits
from appliance.cluster.group import RaftGroup
from appliance.errors import CorruptData, LimitExceeded
from appliance.raft.codec import decode_message, encode_message
from appliance.raft.types import Message

logger = logging.getLogger(__name__)


class RaftTransport(Protocol):
    """What a network must offer the registry (routes, the simulator, an in-memory test net)."""

    def send(self, peer: str, group_id: str, message: bytes) -> None:
        """Queue `message` (raft/codec.py bytes) for `group_id` on `peer`; never blocks.

        A message that cannot be queued (peer unknown or unreachable, link full) is dropped:
        RAFT resends what matters. The transport calls `deliver` on the peer's registry.
        """
        ...

    def flush(self) -> None:
        """Put what `send` queued on the wire now, not on the loop's next turn: the group may
        block next (its fsync), and a follower fsyncs alongside its leader only if the append
        has already left."""
        ...


class GroupOutbox:
    """A group's `Transport` (cluster/group.py): encodes each message and hands it to the network."""

    def __init__(self, transport: RaftTransport, group_id: str) -> None:
        self.transport = transport
        self.group_id = group_id

    def send(self, messages: Sequence[Message]) -> None:
        """Encode and hand over every message, then flush them out at once (one flush per Ready
        step): the driver's next step may be an fsync that blocks the loop."""
        if not messages:
            return
        for message in messages:
            self.transport.send(message.to, self.group_id, encode_message(message))
        self.transport.flush()


class GroupRegistry:
    def __init__(
        self, transport: RaftTransport, *, groups_max: int = limits.RAFT_GROUPS_PER_WORKER_MAX
    ) -> None:
        self.transport = transport
        self.groups_max = groups_max
        self._groups: dict[str, RaftGroup] = {}
        self.dropped_unknown = 0  # messages for a group not owned here
        self.dropped_corrupt = 0  # messages that did not decode, or were not addressed to this peer
        # told of every message for a group not owned here (the meta driver learns that a meta
        # group exists before this server has joined it)
        self.on_unknown: Callable[[str, str], None] | None = None

    def outbox(self, group_id: str) -> GroupOutbox:
        """The transport a new RaftGroup with this id sends through."""
        return GroupOutbox(self.transport, group_id)

    def add(self, group: RaftGroup) -> None:
        if group.group_id in self._groups:
            raise ValueError(f"group {group.group_id} is already registered")
        if len(self._groups) >= self.groups_max:
            raise LimitExceeded(f"{len(self._groups)} RAFT groups on this worker")
        self._groups[group.group_id] = group

    def remove(self, group_id: str) -> RaftGroup | None:
        return self._groups.pop(group_id, None)

    def get(self, group_id: str) -> RaftGroup | None:
        return self._groups.get(group_id)

    def __iter__(self) -> Iterator[RaftGroup]:
        return iter(list(self._groups.values()))

    def __len__(self) -> int:
        return len(self._groups)

    def deliver(self, group_id: str, sender: str, message: bytes) -> bool:
        """Hand one message from the network to its group; False if it was dropped."""
        group = self._groups.get(group_id)
        if group is None:
            self.dropped_unknown += 1
            if self.on_unknown is not None:
                self.on_unknown(group_id, sender)
            return False
        try:
            decoded = decode_message(message)
        except CorruptData as exc:
            self.dropped_corrupt += 1
            logger.debug("group %s: undecodable RAFT message from %s: %s", group_id, sender, exc)
            return False
        if decoded.sender != sender or decoded.to != group.core.id:
            self.dropped_corrupt += 1
            return False
        group.step(decoded)
        return True

    def peer_gone(self, peer: str) -> None:
        """The connection to `peer`'s host closed: every group it led here elects another soon."""
        for group in list(self._groups.values()):
            group.peer_gone(peer)

    def tick(self) -> None:
        """Tick every group from its clock (a worker calls this every RAFT_TICK_S)."""
        for group in list(self._groups.values()):
            if group.tick():
                group.kick()
