"""The meta group: which streams and consumers exist, with their configs, in a durable RAFT log.

State (pure, JSON-able): account -> stream name -> {"config", "created", "group", "consumers":
{name: {"config", "created", "group"}}}, where "group" is the asset's RAFT group: {"name",
"peers", "preferred"} (so any node can answer where an asset lives). The proposer (the meta
leader) decides the group when an asset is first proposed: placement (cluster/placement.py) over
the servers it knows for a stream, the stream's peers for a consumer (R follows its stream);
updates keep it. Operations are proposed by the API handlers and applied in log order;
`on_change` tells the service to create, update or remove the live objects. On restart the log
replays (snapshot + entries) before the service materialises every stream and consumer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

from appliance.clock import Clock
from appliance.cluster.group import Scheduler
from appliance.cluster.placement import PlacementRequest, ServerInfo, place
from appliance.jetstream.groups import durable_storage, group_name, memory_storage, start_group
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
            if "group" in op:
                streams[name]["group"] = op["group"]
        elif kind == "stream_del":
            streams.pop(str(op["stream"]), None)
        elif kind == "consumer_put":
            stream = streams.get(str(op["stream"]))
            config = op["config"]
            if stream is not None and isinstance(config, dict):
                consumers = stream["consumers"]
                assert isinstance(consumers, dict)
                record: Record = {"config": config, "created": op["created"]}
                if "group" in op:
                    record["group"] = op["group"]
                consumers[str(config["name"])] = record
        elif kind == "consumer_del":
            stream = streams.get(str(op["stream"]))
            if stream is not None:
                consumers = stream["consumers"]
                assert isinstance(consumers, dict)
                consumers.pop(str(op["consumer"]), None)
        else:
            raise AssertionError(f"unknown meta op {kind!r}")

    def group_of(self, account: str, stream: str, consumer: str = "") -> object:
        """The recorded RAFT group of a stream (or of its consumer); None if unknown."""
        record = self.accounts.get(account, {}).get(stream)
        if record is not None and consumer:
            consumers = record["consumers"]
            assert isinstance(consumers, dict)
            record = consumers.get(consumer)
        return None if record is None else record.get("group")

    def snapshot(self) -> bytes:
        return json.dumps(self.accounts, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        self.accounts = json.loads(data) if data else {}


class MetaGroup:
    """The meta state in its RAFT group; on_change runs for every applied op once started."""

    def __init__(
        self, *, root: str | None, peer: str, clock: Clock, rng: random.Random, scheduler: Scheduler | None,
        server_name: str = "", cluster: str = "", tags: tuple[str, ...] = (), unique_tag: str = "",
    ) -> None:
        self.peer = peer
        # the JetStream servers placement may choose from: this one until the meta group spans a cluster
        self.servers = [ServerInfo(server_name or peer, peer, cluster, tags)]
        self.cluster = cluster
        self.unique_tag = unique_tag
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
        done(False) if it was lost. Raises NotLeader or LimitExceeded when refused at once, and
        PlacementError when a new stream's replicas find no servers."""
        op = self._with_group(op)
        self.group.propose(json.dumps(op, separators=(",", ":")).encode(), lambda ok, _index: done(ok))

    def _with_group(self, op: dict[str, object]) -> dict[str, object]:
        """A stream_put/consumer_put with its RAFT group: the recorded one, or a new placement."""
        kind = op["op"]
        if kind not in ("stream_put", "consumer_put") or "group" in op:
            return op
        account, config = str(op["acc"]), op["config"]
        assert isinstance(config, dict)
        if kind == "stream_put":
            stream = str(config["name"])
            group = self.state.group_of(account, stream)
            if group is None and not self.cluster:  # a server of its own: it holds everything
                group = _group(group_name("S", account, stream), [self.peer], self.peer)
            if group is None:
                replicas = max(int(str(config.get("num_replicas", 1))), 1)
                placement = config.get("placement")
                wanted = placement if isinstance(placement, dict) else {}
                request = PlacementRequest(
                    replicas,
                    str(wanted.get("cluster") or self.cluster),
                    tags=tuple(str(tag) for tag in wanted.get("tags") or ()),
                    preferred=str(wanted.get("preferred") or ""),
                    storage="memory" if config.get("storage") == "memory" else "file",
                    reserved_bytes=max(int(str(config.get("max_bytes", -1))), 0),
                    unique_tag=self.unique_tag,
                )
                peers = place(request, self.servers)
                group = _group(group_name("S", account, stream), peers, peers[0])
        else:
            stream, consumer = str(op["stream"]), str(config["name"])
            group = self.state.group_of(account, stream, consumer)
            if group is None:
                owner = self.state.group_of(account, stream)
                peers = list(owner["peers"]) if isinstance(owner, dict) else [self.peer]
                preferred = str(owner["preferred"]) if isinstance(owner, dict) else self.peer
                group = _group(group_name("C", account, stream, consumer), peers, preferred)
        return {**op, "group": group}


def _group(name: str, peers: list[str], preferred: str) -> dict[str, object]:
    return {"name": name, "peers": peers, "preferred": preferred}
