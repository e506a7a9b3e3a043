"""ClusterDriver: clustered JetStream's periodic duties on the worker that runs it.

Every META_CHECK_S it looks at the JetStream servers the routes connect us to
(cluster/meta_formation.py) and
  - forms or joins the meta group of a new cluster (Formation.decide);
  - on the meta leader, adds a connected server that is not a voter yet (one change at a time,
    as RAFT's single-server membership changes require);
  - keeps placement's server list (connected servers only: an offline one gets no new replicas)
    and the peer id -> server name table that Cluster Information prints;
  - makes sure only each stream's leader holds interest in the stream's subjects (followers must
    not, or publishes would be stored twice): a new leader subscribes at once (its group's
    on_lead), a deposed one drops it here at the latest one check later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from appliance import limits
from appliance.cluster.meta_formation import Formation, expected_size, known_servers
from appliance.cluster.placement import ServerInfo
from appliance.errors import ApplianceError
from appliance.jetstream.meta import META_GROUP
from appliance.server.routes import RouteManager

if TYPE_CHECKING:
    from appliance.cluster.raft_host import RaftHost
    from appliance.jetstream.service import JetStreamService

logger = logging.getLogger(__name__)


class ClusterDriver:
    def __init__(self, service: JetStreamService, routes: RouteManager, raft: RaftHost) -> None:
        self.service = service
        self.routes = routes
        self.raft = raft
        meta = service.meta
        options = service.options
        self.own = ServerInfo(service.server.server_name, meta.peer, options.cluster.name,
                              tuple(options.server_tags))
        self.formation = Formation(meta.peer, expected_size(options.cluster), wait_s=limits.META_FORM_WAIT_S,
                                   started_s=service.clock.monotonic())
        self.heard_meta = False
        self.known: list[ServerInfo] = []
        raft.registry.on_unknown = self._on_unknown
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.check()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.raft.registry.on_unknown = None

    def _on_unknown(self, group_id: str, _sender: str) -> None:
        if group_id == META_GROUP:
            self.heard_meta = True

    def check(self) -> None:
        self._timer = self.service.loop.call_later(limits.META_CHECK_S, self.check)
        try:
            self._check()
        except ApplianceError as exc:  # one bad turn must not stop the driver
            logger.error("JetStream cluster check failed: %s", exc)

    def _check(self) -> None:
        service = self.service
        meta = service.meta
        self.known = known_servers(self.routes)
        for server in self.known:
            service.peer_names[server.peer] = server.name
        meta.servers = [self.own, *self.known]
        if meta.group is None:
            decision = self.formation.decide([s.peer for s in self.known], heard_group=self.heard_meta,
                                              now_s=service.clock.monotonic())
            if decision is not None and decision.join:
                logger.info("JetStream cluster: joining the meta group of the cluster")
                meta.join()
            elif decision is not None:
                names = ", ".join(service.peer_name(peer) for peer in decision.voters)
                logger.info("JetStream cluster: forming the meta group with %s", names)
                meta.form(decision.voters)
        elif meta.group.ready_to_lead():
            self._add_missing_voter()
        for ajs in service.accounts.values():
            ajs.follow_leaders()

    def _add_missing_voter(self) -> None:
        group = self.service.meta.group
        assert group is not None
        voters = set(group.voters())
        for server in self.known:
            if server.peer in voters:
                continue
            try:
                group.add_voter(server.peer)
            except ApplianceError as exc:  # a change in flight: the next check adds it
                logger.debug("meta group: adding %s later: %s", server.name, exc)
                return
            logger.info("JetStream cluster: adding %s to the meta group", server.name)
            return

    def offline(self, peer: str) -> bool:
        """A server of the cluster that no route connects us to now."""
        return peer != self.own.peer and all(server.peer != peer for server in self.known)
