"""ClusterDriver: clustered JetStream's periodic duties on the worker that runs it.

Every META_CHECK_S it looks at the JetStream servers the routes connect us to
(cluster/meta_formation.py) and
  - forms or joins the meta group of a new cluster (Formation.decide);
  - on the meta leader, adds a connected server that is not a voter yet (one change at a time,
    as RAFT's single-server membership changes require);
  - keeps placement's server list (connected servers only: an offline one gets no new replicas)
    with each one's free JetStream storage and memory (route INFO `js_free`, ours announced
    again when it moved), and the peer id -> server name table that Cluster Information prints;
  - makes sure only each stream's leader holds interest in the stream's subjects (followers must
    not, or publishes would be stored twice): a new leader subscribes at once (its group's
    on_lead), a deposed one drops it here at the latest one check later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from appliance import limits
from appliance.cluster.meta_formation import Formation, expected_size, known_servers
from appliance.cluster.placement import ServerInfo
from appliance.errors import ApplianceError
from appliance.jetstream.meta import META_GROUP
from appliance.durations import go_duration
from appliance.jetstream.regroup import Exclusion, exclusions, peers_of, restarted_since_excluded
from appliance.jetstream.resources import free_bytes
from appliance.server.routes import RouteManager

if TYPE_CHECKING:
    from appliance.cluster.raft_host import RaftHost
    from appliance.jetstream.service import JetStreamService

logger = logging.getLogger(__name__)
FREE_NOTICE_BYTES = 1 << 20  # free storage announced again once it moved by more than this
FREE_NOTICE_SHARE = 0.01  # and by more than this share of what was announced


class ClusterDriver:
    def __init__(self, service: JetStreamService, routes: RouteManager, raft: RaftHost) -> None:
        self.service = service
        self.routes = routes
        self.raft = raft
        meta = service.meta
        options = service.options
        self.own = ServerInfo(service.server.server_name, meta.peer, options.cluster.name,
                              tuple(options.server_tags))
        # free JetStream storage and memory: in our route INFO (js_free), announced again when it
        # moved by more than FREE_NOTICE_SHARE; taken at each check
        self._free = free_bytes(service)
        self._free_told = dict(self._free)
        service.server.jetstream_free = lambda: dict(self._free)
        self.formation = Formation(meta.peer, expected_size(options.cluster), wait_s=limits.META_FORM_WAIT_S,
                                   started_s=service.clock.monotonic())
        self.heard_meta = False
        self.known: list[ServerInfo] = []
        raft.registry.on_unknown = self._on_unknown
        self._timer: asyncio.TimerHandle | None = None
        self._next_replace_s = 0.0
        self._replacing = False  # a re-placement proposal in flight: one at a time
        self._refused: set[str] = set()  # removed servers already logged as refused
        self._readding = False  # a server_readd proposal in flight: one at a time
        self._told_removed = False
        self._gone: set[str] = set()  # servers seen offline since they were last connected
        # PEER.REMOVE exclusions (account, stream, peer) whose server went offline and came back
        # after the exclusion was made: they end at the next re-placement (meta.replacement_op)
        self.restarted: set[Exclusion] = set()

    def start(self) -> None:
        self.check()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.raft.registry.on_unknown = None
        self.service.server.jetstream_free = None

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
        known = known_servers(self.routes)
        now_known = {server.peer for server in known}
        # a server that went offline and came back restarted: PEER.REMOVE's exclusions of it made
        # before that end (meta.py); a restart before a peer-remove does not (regroup.py)
        self._gone |= {server.peer for server in self.known} - now_known
        self.restarted = restarted_since_excluded(self.restarted, exclusions(meta.state.accounts),
                                                  self._gone & now_known)
        self._gone -= now_known
        self.known = known
        for server in self.known:
            service.peer_names[server.peer] = server.name
        self._note_free()
        meta.servers = [self.own, *self.known]
        if meta.group is None:
            formed = sorted(tuple(map(str, voters)) for peer in list(self.routes.peers.values())
                            if isinstance(voters := peer.conn.remote_info.get("js_meta_voters"), list) and voters)
            decision = self.formation.decide([s.peer for s in self.known], heard_group=self.heard_meta,
                                              now_s=service.clock.monotonic(), formed=formed[-1] if formed else ())
            lost = self._store_was_lost()
            if decision is not None and decision.join:
                logger.info("JetStream cluster: joining the meta group of the cluster")
                meta.join()
            elif decision is not None:
                names = ", ".join(service.peer_name(peer) for peer in decision.voters)
                logger.info("JetStream cluster: forming the meta group with %s", names)
                meta.form(decision.voters)
            if decision is not None and lost:
                service.meta_lost()
        elif meta.group.ready_to_lead():
            self._add_missing_voter()
            self._remove_evicted_voter()
            now = service.clock.monotonic()
            if now >= self._next_replace_s and not self._replacing:
                self._next_replace_s = now + limits.JS_REPLACE_CHECK_S
                self._replace_one()
        elif self.peer_removed_here():
            self._note_removed_once()
        elif self._told_removed:  # re-added by the meta leader (server_readd)
            self._told_removed = False
            logger.warning("JetStream cluster: this server was added back to the cluster")
        self._note_peer_stores()
        voters = meta.group.voters() if meta.group is not None else ()
        if voters != service.server.jetstream_meta_voters:  # our peers learn them (meta_formation.py)
            service.server.jetstream_meta_voters = voters
            self.routes.announce_info_to_appliance_peers()
        for ajs in service.accounts.values():
            ajs.follow_leaders()

    def _note_free(self) -> None:
        free = self._free = free_bytes(self.service)
        self.own = dataclasses.replace(self.own, storage_free_bytes=free["file"], memory_free_bytes=free["memory"])
        told = self._free_told
        if any(abs(free[k] - told[k]) > max(FREE_NOTICE_BYTES, told[k] * FREE_NOTICE_SHARE) for k in free):
            self._free_told = dict(free)
            self.routes.announce_info_to_appliance_peers()

    def _store_was_lost(self) -> bool:
        """This server's store is new while a peer remembers it with another one (route INFO
        `js_peer_stores`): it was wiped or replaced, and what its votes stood for went with it."""
        ledger = self.service.ledger
        if not ledger.new:
            return False
        name = self.service.server.server_name
        for peer in list(self.routes.peers.values()):
            known = peer.conn.remote_info.get("js_peer_stores")
            ids = known.get(name) if isinstance(known, dict) else None
            if isinstance(ids, list) and any(other != ledger.store_id for other in ids):
                return True
        return False

    def _note_peer_stores(self) -> None:
        """Remember the store each appliance peer runs on (its route INFO `js_store`); tell the
        peers when that is news, so a peer on a new store can find out it lost the old one."""
        changed = False
        for peer in list(self.routes.peers.values()):
            info = peer.conn.remote_info
            name, store = info.get("server_name"), info.get("js_store")
            if isinstance(name, str) and isinstance(store, str):
                changed |= self.service.ledger.saw_peer(name, store)
        if changed:
            self.routes.announce_info_to_appliance_peers()

    def _add_missing_voter(self) -> None:
        group = self.service.meta.group
        assert group is not None
        voters = set(group.voters())
        removed = self.service.meta.state.removed
        for server in self.known:
            if server.peer in voters:
                continue
            if server.peer in removed:
                self._readd_when_due(server, removed[server.peer])
                continue
            try:
                group.add_voter(server.peer)
            except ApplianceError as exc:  # a change in flight: the next check adds it
                logger.debug("meta group: adding %s later: %s", server.name, exc)
                return
            logger.info("JetStream cluster: adding %s to the meta group", server.name)
            return

    def _readd_when_due(self, server: ServerInfo, removed_at: float) -> None:
        """A server evicted by SERVER.REMOVE is connected: refused until the peer-remove timeout
        has passed since its removal, then added back by a `server_readd` op (nats-server re-adds a
        removed peer it hears from after peerRemoveTimeout); the next check makes it a voter."""
        timeout_s = self.service.options.appliance.peer_remove_timeout_s
        waited_s = self.service.clock.wall() - removed_at
        if waited_s < timeout_s:
            if server.peer not in self._refused:
                self._refused.add(server.peer)
                logger.warning("JetStream cluster: %s was removed from the cluster (SERVER.REMOVE): "
                               "it is not added back to the meta group before %s after its removal",
                               server.name, _duration(timeout_s))
            return
        if self._readding:
            return
        self._readding = True

        def done(ok: bool) -> None:
            self._readding = False
            if ok:
                self._refused.discard(server.peer)

        logger.warning("JetStream cluster: %s, removed from the cluster %s ago (SERVER.REMOVE), is back: "
                       "adding it again", server.name, _duration(waited_s))
        try:
            self.service.meta.propose({"op": "server_readd", "peer": server.peer}, done)
        except ApplianceError as exc:  # not the leader any more, or full: the next check asks again
            self._readding = False
            logger.debug("re-adding %s later: %s", server.name, exc)

    def _remove_evicted_voter(self) -> None:
        """SERVER.REMOVE committed: the meta leader takes the server out of the meta group."""
        meta = self.service.meta
        assert meta.group is not None
        # its replicated streams are re-placed first (_replace_one), so it hears of it and deletes
        # its copies; an R1 stream it alone holds stays assigned to it (nothing else has its data)
        holding = {peer for streams in meta.state.accounts.values() for record in streams.values()
                   for peer in peers_of(record.get("group")) if len(peers_of(record.get("group"))) > 1}
        for peer in meta.group.voters():
            if peer in meta.state.removed and peer not in holding:  # itself too: RAFT hands over leadership
                try:
                    meta.group.remove_voter(peer)
                except ApplianceError as exc:  # a change in flight: the next check removes it
                    logger.debug("meta group: removing %s later: %s", peer, exc)
                    return
                logger.info("JetStream cluster: removing %s from the meta group", self.service.peer_name(peer))
                return

    def _replace_one(self) -> None:
        """On the meta leader: one stream whose group holds an evicted server or lacks replicas
        gets a new peer list (a `stream_peers` op; regroup.py, membership.py)."""
        meta = self.service.meta
        change = meta.replacement_op(frozenset(self.restarted))
        if change is None:
            return
        self._replacing = True

        def done(_ok: bool) -> None:
            self._replacing = False

        logger.info("JetStream cluster: re-placing stream '%s > %s' on %s", change["acc"], change["stream"],
                    ", ".join(self.service.peer_name(p) for p in peers_of(change["group"])))
        try:
            meta.propose(change, done)
        except ApplianceError as exc:
            self._replacing = False
            logger.debug("re-placement later: %s", exc)

    def peer_removed_here(self) -> bool:
        """This server's meta log says it was evicted (SERVER.REMOVE)."""
        return self.service.meta.peer in self.service.meta.state.removed

    def _note_removed_once(self) -> None:
        if not self._told_removed:
            self._told_removed = True
            logger.warning("JetStream cluster: this server was removed from the cluster (SERVER.REMOVE): "
                           "it holds no replicas and is not a member until re-added (once connected %s "
                           "after its removal)", _duration(self.service.options.appliance.peer_remove_timeout_s))

    def offline(self, peer: str) -> bool:
        """A server of the cluster that no route connects us to now."""
        return peer != self.own.peer and all(server.peer != peer for server in self.known)



def _duration(seconds: float) -> str:
    return go_duration(int(seconds * 1e9))
