"""How the JetStream meta group of a new cluster forms, and which servers it can place assets on.

The servers: every appliance JetStream server the routes connect us to (its route INFO carries
`jetstream` and `js_raft`, server/routes.py), plus this one. Peer ids are `peer_token(name)`.

Forming (a pure policy, `Formation.decide`, time passed in). A server whose meta log already holds
voters just runs it. A new one whose peers' route INFO names the voters of a meta group
(`js_meta_voters`, re-sent when they change) takes that group as it is: it bootstraps with
exactly those voters if it is one of them, else it joins and waits for the leader to add it. A
group that exists is never bootstrapped a second time with other voters (a server that started
late on a loaded host did so: its peer had formed with the servers it knew, and the late one
formed with every configured server). Otherwise it waits until it can bootstrap the same voter
set as its peers:

1. It knows every server its configuration names (`expected`: the distinct route URLs that are
   not itself, plus itself): it bootstraps with all of them. Every server of a fresh cluster
   computes the same set, so they agree without talking (a peer's first votes may arrive
   before this server knows everybody: it waits, it does not join an empty config).
2. `wait_s` passed and it heard a meta group's RAFT traffic: it joins with no voters of its own
   and waits for the leader to add it (the membership entry carries the whole voter set).
3. `wait_s` passed, nothing heard, and it knows a quorum of `expected`: it bootstraps with those it knows
   (nats-server's "once two servers are up you are ready"). The missing servers are added by the
   leader when they appear (AddPeer, one at a time). Two servers that saw different sets at this
   moment could bootstrap different voters; a difference of one server keeps majorities
   overlapping, more does not — the weak spot of a partial start, reported in the issue note.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Iterable
from dataclasses import dataclass

from appliance.cluster.placement import ServerInfo
from appliance.cluster.route_transport import peer_token
from appliance.config.options import ClusterOptions
from appliance.server.routes import JS_RAFT_VERSION, RouteManager, parse_route_url

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::1", "::", ""})


@dataclass(frozen=True, slots=True)
class Decision:
    join: bool  # True: wait for a leader's log; False: bootstrap with `voters`
    voters: tuple[str, ...] = ()


def quorum(size: int) -> int:
    return size // 2 + 1


def expected_size(options: ClusterOptions) -> int:
    """The servers the configuration names: distinct route addresses that are not our own listen
    address, plus this server."""
    own_port = options.port
    others: set[tuple[str, int]] = set()
    for url in options.routes:
        try:
            host, port, _, _ = parse_route_url(url)
        except ValueError:
            continue
        if port == own_port and (host in LOCAL_HOSTS or host == options.host):
            continue
        others.add((host, port))
    return len(others) + 1


class Formation:
    def __init__(self, own_peer: str, expected: int, *, wait_s: float, started_s: float) -> None:
        assert expected >= 1
        self.own_peer = own_peer
        self.expected = expected
        self.wait_s = wait_s
        self.started_s = started_s

    def decide(self, known: Iterable[str], *, heard_group: bool, now_s: float,
               formed: tuple[str, ...] = ()) -> Decision | None:
        """What to do now that `known` peers (besides us) are connected; None: keep waiting.
        `formed`: the voters of the meta group a peer runs (its route INFO), if any."""
        if formed:
            return Decision(join=False, voters=formed) if self.own_peer in formed else Decision(join=True)
        peers = tuple(sorted({*known, self.own_peer}))
        if len(peers) >= self.expected:
            return Decision(join=False, voters=peers)
        if now_s - self.started_s < self.wait_s:
            return None
        if heard_group:
            return Decision(join=True)
        if len(peers) >= quorum(self.expected):
            return Decision(join=False, voters=peers)
        return None


def known_servers(routes: RouteManager) -> list[ServerInfo]:
    """The appliance JetStream servers connected to us by a route (never a Go node)."""
    out: list[ServerInfo] = []
    for peer in list(routes.peers.values()):
        info = peer.conn.remote_info
        name = info.get("server_name")
        if info.get("jetstream") is not True or info.get("js_raft") != JS_RAFT_VERSION or not isinstance(name, str):
            continue
        tags = info.get("tags")
        tag_list = tuple(str(tag) for tag in tags) if isinstance(tags, list) else ()
        server = ServerInfo(name, peer_token(name), str(info.get("cluster") or ""), tag_list)
        free = info.get("js_free")
        if isinstance(free, dict):  # its free JetStream storage and memory (placement)
            server = dataclasses.replace(server, storage_free_bytes=_bytes(free.get("file"), server.storage_free_bytes),
                                         memory_free_bytes=_bytes(free.get("memory"), server.memory_free_bytes))
        out.append(server)
    return out


def _bytes(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
