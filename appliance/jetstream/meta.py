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

import dataclasses
import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from appliance import limits
from appliance.clock import Clock
from appliance.cluster.forward import ProposalForwarder
from appliance.cluster.group import RaftGroup, Scheduler
from appliance.cluster.placement import PlacementError, PlacementRequest, ServerInfo, place
from appliance.cluster.raft_storage import DurableStorage
from appliance.cluster.registry import GroupRegistry
from appliance.errors import NotLeader
from appliance.jetstream.regroup import Exclusion, excluded_of, follows, peers_of, regrouped, resized
from appliance.jetstream.groups import durable_storage, group_name, memory_storage, start_group
from appliance.raft.storage import LogStorage
from appliance.raft.types import ConfState, Entry, EntryType, RaftConfig
from appliance.store.raftlog import OsLogFiles

Record = dict[str, object]
OnChange = Callable[[dict[str, object]], None]


class MetaState:
    def __init__(self) -> None:
        self.accounts: dict[str, dict[str, Record]] = {}
        # peers evicted by SERVER.REMOVE -> the meta leader's wall clock at the removal (0: not known):
        # neither voters nor replicas until a `server_readd` (cluster_driver.py: once it is back
        # after the peer-remove timeout, as nats-server)
        self.removed: dict[str, float] = {}

    def apply(self, op: dict[str, object]) -> None:
        if op["op"] == "server_remove":
            removed_at = op.get("ts", 0.0)
            self.removed[str(op["peer"])] = float(removed_at) if isinstance(removed_at, (int, float)) else 0.0
            return
        if op["op"] == "server_readd":
            self.removed.pop(str(op["peer"]), None)
            return
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
            if existing is not None and "group" in existing:
                streams[name]["group"] = existing["group"]
            if "group" in op:
                _set_group(streams[name], op["group"])
        elif kind == "stream_peers":  # a membership change of the stream's group (regroup.py)
            record = streams.get(str(op["stream"]))
            if record is not None:
                _set_group(record, op["group"])
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
        if not self.removed:
            return json.dumps(self.accounts, separators=(",", ":")).encode()
        state = {"v": SNAPSHOT_V2, "accounts": self.accounts, "removed": sorted(self.removed),
                 "removed_at": self.removed}
        return json.dumps(state, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        state = json.loads(data) if data else {}
        # version 2 (with removed servers): "v" holds a number, never an account's streams (a dict)
        if state.get("v") == SNAPSHOT_V2:
            times = state.get("removed_at", {})  # absent in snapshots written before re-adds
            self.accounts = state["accounts"]
            self.removed = {peer: float(times.get(peer, 0.0)) for peer in state["removed"]}
        else:
            self.accounts, self.removed = state, {}


SNAPSHOT_V2 = 2


def _set_group(record: Record, group: object) -> None:
    """A stream's group, and its consumers' groups following it (same peers)."""
    old = record.get("group")
    record["group"] = group
    if not isinstance(group, dict) or not isinstance(old, dict) or old.get("peers") == group.get("peers"):
        return
    consumers = record["consumers"]
    assert isinstance(consumers, dict)
    for consumer in consumers.values():
        if "group" in consumer:
            consumer["group"] = follows(consumer["group"], group)


META_GROUP = "_meta"


@dataclass(frozen=True, slots=True)
class MetaNetwork:
    """What the meta group of a clustered server runs on: its worker's GroupRegistry (the routes)
    and the forwarder that hands a follower's proposals to the leader (cluster/forward.py)."""

    registry: GroupRegistry
    forwarder: ProposalForwarder
    tick_s: float = limits.RAFT_TICK_S


class MetaGroup:
    """The meta state in its RAFT group; on_change runs for every applied op once started.

    Standalone: a single voter, leader at once. Clustered (`network` given): a RAFT group over
    the routes whose voters are every JetStream server of the cluster. A server with a meta log
    runs it at once; a new one has no group until `form(voters)` or `join()` (the meta driver
    decides, cluster/meta_formation.py), and until then refuses proposals (NotLeader)."""

    def __init__(
        self, *, root: str | None, peer: str, clock: Clock, rng: random.Random, scheduler: Scheduler | None,
        server_name: str = "", cluster: str = "", tags: tuple[str, ...] = (), unique_tag: str = "",
        network: MetaNetwork | None = None,
    ) -> None:
        self.peer = peer
        self.server_name = server_name or peer
        # the JetStream servers placement may choose from: this one until the meta group spans a cluster
        self.servers = [ServerInfo(server_name or peer, peer, cluster, tags)]
        self.cluster = cluster
        self.unique_tag = unique_tag
        self.state = MetaState()
        self.live = False
        self.on_change: OnChange | None = None
        self.damage: list[str] = []  # what recovering a durable log damaged mid-file lost
        self.network = network
        self._root = root
        self._clock, self._rng, self._scheduler = clock, rng, scheduler
        self.group: RaftGroup | None = None
        if network is not None:
            assert root is not None and scheduler is not None
            if _log_exists(root, META_GROUP):
                self._start_replicated(None)
        else:
            storage: LogStorage
            if root is not None:
                durable = durable_storage(root, META_GROUP, peer)
                self.damage = list(durable.damage)
                storage = durable
            else:
                storage = memory_storage(peer)
            self.group = start_group(
                name=META_GROUP, peer=peer, storage=storage, machine=self, clock=clock, rng=rng,
                scheduler=scheduler,
            )
        self.live = True

    @property
    def clustered(self) -> bool:
        return self.network is not None

    def form(self, voters: tuple[str, ...]) -> None:
        """Bootstrap a new cluster's meta group with these voters (every server computed the same)."""
        assert self.group is None and self.peer in voters
        self._start_replicated(ConfState(voters))
        assert self.group is not None
        if voters[0] == self.peer:
            self.group.campaign()  # one server starts the first election: no split vote to wait out

    def join(self) -> None:
        """Wait, with no voters, for the leader of an existing meta group to add this server."""
        assert self.group is None
        self._start_replicated(None)

    def _start_replicated(self, bootstrap: ConfState | None) -> None:
        network = self.network
        assert network is not None and self._root is not None and self._scheduler is not None
        storage = DurableStorage(OsLogFiles(os.path.join(self._root, META_GROUP)), "log", bootstrap=bootstrap)
        self.damage = list(storage.damage)
        group = RaftGroup(
            group_id=META_GROUP, config=RaftConfig(id=self.peer), storage=storage,
            transport=network.registry.outbox(META_GROUP), state_machine=self, clock=self._clock,
            rng=random.Random(self._rng.random()), tick_s=network.tick_s,
        )
        live, self.live = self.live, False
        while group.process_ready():  # the committed prefix this log holds applies before anything else
            pass
        self.live = live
        group.scheduler = self._scheduler
        network.registry.add(group)
        self.group = group

    def voters(self) -> tuple[str, ...]:
        return self.group.voters() if self.group is not None else ()

    def is_leader(self) -> bool:
        return self.group is not None and self.group.is_leader()

    def leader(self) -> str:
        """The meta leader's peer id; "" when none is known."""
        return self.group.leader() if self.group is not None else ""

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
        data = json.dumps(op, separators=(",", ":")).encode()
        group = self.group
        if group is None:
            raise NotLeader("the meta group has not formed yet", leader_hint=None)
        if self.network is None:
            group.propose(data, lambda ok, _index: done(ok))
        else:  # a follower's proposal goes to the meta leader (cluster/forward.py)
            self.network.forwarder.propose(group, data, lambda ok, _index: done(ok))

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
            replicas = max(int(str(config.get("num_replicas", 1) or 1)), 1)
            if group is None:
                peers = self.place_peers(config, replicas)
                # a stream made again under the same name gets a group (and RAFT log) of its own
                group = _group(group_name("S", account, stream, str(op.get("created", ""))), peers, peers[0])
            elif self.cluster and isinstance(group, dict) and replicas != self._recorded_replicas(account, stream):
                group = self._resized(config, group, replicas)  # a replica-count change (regroup.py)
        else:
            stream, consumer = str(op["stream"]), str(config["name"])
            group = self.state.group_of(account, stream, consumer)
            if group is None:
                owner = self.state.group_of(account, stream)
                peers = list(owner["peers"]) if isinstance(owner, dict) else [self.peer]
                # the proposer (the stream's leader, which handles consumer creates) leads it first
                preferred = self.peer if self.peer in peers else str(owner["preferred"]) if isinstance(
                    owner, dict) else self.peer
                name = group_name("C", account, stream, consumer, str(op.get("created", "")))
                group = _group(name, peers, preferred)
        return {**op, "group": group}


    def place_peers(self, config: dict[str, object], replicas: int, exclude: frozenset[str] = frozenset(),
                    kept: frozenset[str] = frozenset()) -> list[str]:
        """Placement of `replicas` new peers for a stream config; PlacementError if too few servers."""
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
            exclude=exclude | kept | frozenset(self.state.removed),
            kept=kept,
        )
        return place(request, self._with_assets(self.servers))

    def replacements(self, config: dict[str, object], peers: list[str], count: int,
                     exclude: frozenset[str] = frozenset()) -> list[str]:
        """Up to `count` servers placement allows beside `peers` (fewer, even none, when the
        cluster has no spare server: the stream stays under-replicated until one appears)."""
        for wanted in range(count, 0, -1):
            try:
                return self.place_peers(config, wanted, exclude, kept=frozenset(peers))
            except PlacementError:
                continue
        return []

    def replacement_op(self, restarted: frozenset[Exclusion] = frozenset()) -> dict[str, object] | None:
        """The next `stream_peers` op the meta leader proposes, if any: a stream whose group holds
        an evicted server (SERVER.REMOVE), or lacks replicas that a server can now take. A server
        taken off a stream by PEER.REMOVE is not placed on it again unless it restarted since
        (`restarted`: (account, stream, peer) exclusions whose server the driver saw go offline and
        come back after the exclusion was made; its copy was deleted on leave)."""
        removed = self.state.removed
        for account, streams in sorted(self.state.accounts.items()):
            for name, record in sorted(streams.items()):
                group, config = record.get("group"), record.get("config")
                if not isinstance(group, dict) or not isinstance(config, dict):
                    continue
                peers = peers_of(group)
                kept = [peer for peer in peers if peer not in removed]
                lacking = max(int(str(config.get("num_replicas", 1) or 1)), 1) - len(kept)
                excluded = frozenset(peers) | frozenset(peer for peer in excluded_of(group)
                                                        if (account, name, peer) not in restarted)
                extra = self.replacements(config, kept, lacking, exclude=excluded) if lacking > 0 else []
                if kept and kept + extra != peers:
                    changed = regrouped(group, [*kept, *extra])
                    changed["excluded"] = [peer for peer in excluded_of(group) if peer not in extra]
                    if not changed["excluded"]:
                        del changed["excluded"]
                    return {"op": "stream_peers", "acc": account, "stream": name, "group": changed}
        return None

    def _recorded_replicas(self, account: str, stream: str) -> int:
        record = self.state.accounts.get(account, {}).get(stream)
        config = record.get("config") if record is not None else None
        return max(int(str(config.get("num_replicas", 1) or 1)), 1) if isinstance(config, dict) else 1

    def _resized(self, config: dict[str, object], group: dict[str, object], replicas: int) -> dict[str, object]:
        """A replica-count change: shrink keeps the proposer (the stream's leader) first; grow
        places the new peers (PlacementError when the cluster cannot hold them all)."""
        peers = peers_of(group)
        if replicas < len(peers):
            return regrouped(group, resized(peers, replicas, self.peer))
        # an operator asking for more replicas may get a server PEER.REMOVE took off this stream
        extra = self.place_peers(config, replicas - len(peers), kept=frozenset(peers))
        out = regrouped(group, [*peers, *extra])
        out["excluded"] = [peer for peer in excluded_of(group) if peer not in extra]
        if not out["excluded"]:
            del out["excluded"]
        return out

    def _with_assets(self, servers: list[ServerInfo]) -> list[ServerInfo]:
        """The servers with how many streams each holds, so placement spreads them."""
        counts: dict[str, int] = {}
        for streams in self.state.accounts.values():
            for record in streams.values():
                group = record.get("group")
                if isinstance(group, dict):
                    for peer in group.get("peers") or ():
                        counts[str(peer)] = counts.get(str(peer), 0) + 1
        return [dataclasses.replace(s, assets=counts.get(s.peer, 0)) for s in servers]


def _log_exists(root: str, name: str) -> bool:
    directory = os.path.join(root, name)
    return os.path.isdir(directory) and bool(os.listdir(directory))


def _group(name: str, peers: list[str], preferred: str) -> dict[str, object]:
    return {"name": name, "peers": peers, "preferred": preferred}
