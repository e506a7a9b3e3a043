"""RaftHost: the RAFT groups one worker owns and their network, ticking from the worker's clock.

A worker that runs clustered JetStream (worker 0 of a server with a cluster block: it runs
JetStream and holds the routes) has one: a GroupRegistry whose groups talk over a
RouteRaftTransport (their messages cross the routes on $ARAFT.<peer>.<group>.<from>), ticked
every RAFT_TICK_S from the event loop. Groups added to `registry` run their Ready loops on the same
loop (pass the loop as their Scheduler). Its RouteCatchUp serves the stored messages of its
stream groups to lagging replicas and fetches them for its own (cluster/catch_up.py). Its peer
id is `peer_token(server name)`: the name must be unique in the cluster and stable across
restarts, as nats-server requires for JetStream clustering. A standalone server has none.

Fast failover: when a route closes (a killed server's sockets close at once), every group here
whose leader was the gone server elects another within a few ticks instead of an election
timeout (GroupRegistry.peer_gone -> RaftCore.peer_gone). A route that only flapped costs at
most one election: voters that still hear from the leader ignore the early campaign.
"""

from __future__ import annotations

import asyncio

from appliance import limits
from appliance.cluster.catch_up import RouteCatchUp
from appliance.cluster.registry import GroupRegistry
from appliance.cluster.route_transport import RouteRaftTransport, peer_token
from appliance.server.server import Server


class RaftHost:
    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop, *,
                 tick_s: float = limits.RAFT_TICK_S) -> None:
        self.server = server
        self.loop = loop
        self.tick_s = tick_s
        self.server_name = server.options.server_name or server.server_id
        self.peer = peer_token(self.server_name)
        self.transport = RouteRaftTransport(server, self.peer)
        self.registry = GroupRegistry(self.transport)
        self.transport.attach(self.registry)
        # lagging stream replicas fetch the leader's stored messages: `catch_up.source(group_id)`
        self.catch_up = RouteCatchUp(server, self.peer, loop)
        self.catch_up.serve(self.registry)
        self._timer: asyncio.TimerHandle | None = loop.call_later(tick_s, self._tick)
        server.route_down_listeners.append(self._route_down)

    def _route_down(self, server_name: str) -> None:
        self.registry.peer_gone(peer_token(server_name))

    def _tick(self) -> None:
        self._timer = self.loop.call_later(self.tick_s, self._tick)
        self.registry.tick()

    def close(self) -> None:
        """Stop ticking, close every group (fsyncs what it holds), and stop receiving."""
        if self._route_down in self.server.route_down_listeners:
            self.server.route_down_listeners.remove(self._route_down)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for group in self.registry:
            group.close()
            self.registry.remove(group.group_id)
        self.catch_up.close()
        self.transport.close()
