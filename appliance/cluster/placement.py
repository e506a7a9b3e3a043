"""Placement: which servers hold the replicas of a new stream (or consumer) group. Pure.

The meta leader calls `place` with what it knows of every JetStream server and gets the peers
of the new group, or a PlacementError whose text is nats-server's (JetStream API error 10005):

  - only servers of the wanted cluster (placement.cluster, else the requester's), online, with
    JetStream, not already excluded, and carrying every placement tag (case-insensitive, as
    nats-server lower-cases `server_tags`);
  - with `unique_tag` (e.g. "az:"), at most one replica per value of the server's tag that starts
    with that prefix (servers without such a tag are not candidates), counting the peers a
    group keeps when it gets a replacement or more replicas (`kept`);
  - with a byte reservation (max_bytes of the stream), only servers with that much free storage
    (file) or memory (memory): their limit less what their streams reserve or use, as each
    server announces it in route INFO (`js_free`); failing for want of such servers says
    ", insufficient storage" as nats-server does;
  - the least loaded first: fewer replicated assets, then more free resources, then the server
    name (deterministic: same inputs, same answer on every meta leader);
  - the preferred server (placement.preferred) first when it qualifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

NO_SUITABLE_PEERS = "no suitable peers for placement"


class PlacementError(Exception):
    """No placement satisfies the request; str() is nats-server's 10005 description."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    name: str
    peer: str  # stable peer id (spec §9.2)
    cluster: str
    tags: tuple[str, ...] = ()
    online: bool = True
    jetstream: bool = True
    storage_free_bytes: int = 1 << 62
    memory_free_bytes: int = 1 << 62
    assets: int = 0  # replicated streams and consumers it holds (nats-server's HA asset count)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    replicas: int
    cluster: str  # placement.cluster, else the requesting server's cluster
    tags: tuple[str, ...] = ()
    preferred: str = ""  # a server name
    storage: Literal["file", "memory"] = "file"
    reserved_bytes: int = 0  # max_bytes when set (> 0)
    unique_tag: str = ""  # jetstream { unique_tag } prefix, e.g. "az:"
    exclude: frozenset[str] = field(default_factory=frozenset)  # peers that may not be chosen
    # peers the group keeps (a replacement or an added replica): their unique_tag values are taken
    kept: frozenset[str] = field(default_factory=frozenset)


def place(request: PlacementRequest, servers: Sequence[ServerInfo]) -> list[str]:
    """The peers of the new group (preferred first, then by load), or PlacementError."""
    assert request.replicas >= 1
    wanted_tags = {tag.lower() for tag in request.tags}
    in_cluster = [s for s in servers if s.cluster == request.cluster and s.jetstream and s.online
                  and s.peer not in request.exclude]
    tagged = [s for s in in_cluster if wanted_tags <= {tag.lower() for tag in s.tags}]
    if wanted_tags and not tagged:
        listed = ", ".join(f"'{tag}'" for tag in request.tags)
        raise PlacementError(f"{NO_SUITABLE_PEERS}, tags not matched [{listed}]")
    roomy = [s for s in tagged if _free(s, request.storage) >= request.reserved_bytes]
    roomy.sort(key=lambda s: (s.name != request.preferred, s.assets, -_free(s, request.storage), s.name))
    chosen: list[ServerInfo] = []
    zones: set[str] = set()
    if request.unique_tag:
        for server in servers:
            zone = _unique_value(server, request.unique_tag) if server.peer in request.kept else None
            if zone is not None:
                zones.add(zone)
    for server in roomy:
        if request.unique_tag:
            zone = _unique_value(server, request.unique_tag)
            if zone is None or zone in zones:
                continue
            zones.add(zone)
        chosen.append(server)
        if len(chosen) == request.replicas:
            return [s.peer for s in chosen]
    if len(roomy) < len(tagged):  # nats-server names why it discarded candidates
        raise PlacementError(f"{NO_SUITABLE_PEERS}, insufficient storage")
    raise PlacementError(NO_SUITABLE_PEERS)


def _free(server: ServerInfo, storage: str) -> int:
    return server.storage_free_bytes if storage == "file" else server.memory_free_bytes


def _unique_value(server: ServerInfo, prefix: str) -> str | None:
    lowered = prefix.lower()
    for tag in server.tags:
        if tag.lower().startswith(lowered):
            return tag.lower()
    return None
