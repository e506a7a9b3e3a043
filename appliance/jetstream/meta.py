"""The meta group: which streams and consumers exist, with their configs, in a durable RAFT log.

State (pure, JSON-able): account -> stream name -> {"config", "created", "consumers": {name:
{"config", "created"}}}. Operations are proposed by the API handlers and applied in log order;
`on_change` tells the service to create, update or remove the live objects. On restart the log
replays (snapshot + entries) before the service materialises every stream and consumer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

from appliance.clock import Clock
from appliance.cluster.group import Scheduler
from appliance.jetstream.groups import durable_storage, memory_storage, start_group
from appliance.raft.storage import LogStorage
from appliance.raft.types import Entry, EntryType

Record = dict[str, object]
OnChange = Callable[[dict[str, object]], None]


class MetaState:
    def __init__(self) -> None:
        self.accounts: dict[str, dict[str, Record]] = {}

    def apply(self, op: dict[str, object]) -> None:
        account = str(op["acc"])
        streams = self.accounts.setdefault(account, {})
        kind = op["op"]
        if kind == "stream_put":
            config = op["config"]
            assert isinstance(config, dict)
            name = str(config["name"])
            existing = streams.get(name)
            consumers = existing["consumers"] if existing is not None else {}
            streams[name] = {"config": config, "created": op["created"], "consumers": consumers}
        elif kind == "stream_del":
            streams.pop(str(op["stream"]), None)
        elif kind == "consumer_put":
            stream = streams.get(str(op["stream"]))
            config = op["config"]
            if stream is not None and isinstance(config, dict):
                consumers = stream["consumers"]
                assert isinstance(consumers, dict)
                consumers[str(config["name"])] = {"config": config, "created": op["created"]}
        elif kind == "consumer_del":
            stream = streams.get(str(op["stream"]))
            if stream is not None:
                consumers = stream["consumers"]
                assert isinstance(consumers, dict)
                consumers.pop(str(op["consumer"]), None)
        else:
            raise AssertionError(f"unknown meta op {kind!r}")

    def snapshot(self) -> bytes:
        return json.dumps(self.accounts, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        self.accounts = json.loads(data) if data else {}


class MetaGroup:
    """The meta state in its RAFT group; on_change runs for every applied op once started."""

    def __init__(
        self, *, root: str | None, peer: str, clock: Clock, rng: random.Random, scheduler: Scheduler | None
    ) -> None:
        self.state = MetaState()
        self.live = False
        self.on_change: OnChange | None = None
        self.damage: list[str] = []  # what recovering a durable log damaged mid-file lost
        storage: LogStorage
        if root is not None:
            durable = durable_storage(root, "_meta", peer)
            self.damage = list(durable.damage)
            storage = durable
        else:
            storage = memory_storage(peer)
        self.group = start_group(
            name="_meta", peer=peer, storage=storage, machine=self, clock=clock, rng=rng, scheduler=scheduler
        )
        self.live = True

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type != EntryType.NORMAL or not entry.data:
                continue
            op = json.loads(entry.data)
            self.state.apply(op)
            if self.live and self.on_change is not None:
                self.on_change(op)

    def applied_index(self) -> int:
        return 0  # everything lives in the RAFT log: replay it from the snapshot on restart

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state.restore(data)

    def propose(self, op: dict[str, object], done: Callable[[bool], None]) -> None:
        """done(True) runs once the op is committed (durable on a quorum) and applied here;
        done(False) if it was lost. Raises NotLeader or LimitExceeded when refused at once."""
        self.group.propose(json.dumps(op, separators=(",", ":")).encode(), lambda ok, _index: done(ok))
