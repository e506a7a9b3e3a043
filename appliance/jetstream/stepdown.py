"""Leader step-down of a stream's, a consumer's or the meta group (spec §9.5).

`$JS.API.STREAM.LEADER.STEPDOWN.<s>` and `$JS.API.CONSUMER.LEADER.STEPDOWN.<s>.<c>` are answered
by the asset's leader (responder.py), `$JS.API.META.LEADER.STEPDOWN` by the meta leader, and only
for a user of the system account (others get no answer at all, as from nats-server). The
optional body `{"placement": {preferred, cluster, tags}}` picks the successor
(cluster/successor.py); the leader then hands over with a RAFT leadership transfer
(RaftGroup.transfer_leader): the successor first receives every entry the leader has, then is
told to campaign at once, so it wins the election within a round trip and nothing the old
leader accepted is lost. The answer `{"success":true}` goes out when the request is accepted; the
transfer starts STEPDOWN_SETTLE_S later, once every server has heard the request (a successor that
had not would take it as addressed to itself and answer it again).

A single-voter group (R1; nats-server runs no RAFT node for it) answers success and stays as
it is. A standalone server answers 503/10010 (clustering support required).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from appliance import limits
from appliance.cluster.group import RaftGroup
from appliance.cluster.successor import StepDownRefused, Voter, choose_successor
from appliance.errors import NotLeader, ProposalDropped
from appliance.jetstream import errors
from appliance.jetstream.decode import STRING, STRINGS, GoStruct, decode_object, request_body
from appliance.jetstream.request import TYPE_PREFIX, Request, needs_newer_api, stream_of
from appliance.jetstream.wire import go_json
from appliance.server.internal import InternalClient

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream, JetStreamService

logger = logging.getLogger(__name__)

META_STEPDOWN_SUBJECT = "$JS.API.META.LEADER.STEPDOWN"
STEPDOWN_FIELDS = {
    "placement": GoStruct("server.Placement", {"cluster": STRING, "tags": STRINGS, "preferred": STRING},
                          pointer=True),
}
STEPDOWN_STRUCT = "JSApiLeaderStepdownRequest"
STEPDOWN_POLL_S = 0.01  # how often the old leader looks whether the transfer is done


def stream_leader_stepdown(request: Request) -> None:
    service = request.ajs.service
    if not service.meta.clustered:
        raise errors.CLUSTER_REQUIRED.error()
    stream = stream_of(request, request.tokens[3])
    step_down(service, stream.group, request.body, f"stream {stream.config.name!r}")
    follow_when_moved(request.ajs, stream.group, limits.STEPDOWN_FOLLOW_S)
    request.respond("stream_leader_stepdown_response", {"success": True})


def consumer_leader_stepdown(request: Request) -> None:
    service = request.ajs.service
    if not service.meta.clustered:
        raise errors.CLUSTER_REQUIRED.error()
    stream = stream_of(request, request.tokens[3])
    consumer = stream.consumers.get(request.tokens[4])
    if consumer is None:
        raise errors.CONSUMER_NOT_FOUND.error()
    step_down(service, consumer.group, request.body, f"consumer {stream.config.name!r} > {consumer.name!r}")
    follow_when_moved(request.ajs, consumer.group, limits.STEPDOWN_FOLLOW_S)
    request.respond("consumer_leader_stepdown_response", {"success": True})


def step_down(service: JetStreamService, group: RaftGroup, body: bytes, label: str) -> None:
    """Hand `group`'s leadership on as the request's placement asks; raises JsApiError."""
    if len(group.voters()) <= 1:
        return  # nothing to hand over to (nats-server: no RAFT node, success)
    data = request_body(body)  # nats-server reads a body only when it starts with { or [
    placement = decode_object(data, STEPDOWN_FIELDS, STEPDOWN_STRUCT).get("placement") if data else None
    try:
        successor = choose_successor(service.peer, voters_of(service, group),
                                     placement if isinstance(placement, dict) else None,
                                     seen_within_s=limits.STEPDOWN_PEER_SEEN_S)
    except StepDownRefused as exc:
        raise errors.CLUSTER_NO_PEERS.format(err=str(exc)) from None
    if not group.is_leader():
        raise errors.RAFT_GENERAL.format(err=f"{service.peer} is not the leader") from None

    def transfer() -> None:
        try:
            chosen = group.transfer_leader(successor or None)
        except (NotLeader, ProposalDropped) as exc:
            logger.warning("JetStream %s: leader step-down not done: %s", label, exc)
            return
        logger.info("JetStream %s: leader step-down requested, handing leadership to %s",
                    label, service.peer_name(chosen))

    # Every server hears the request (its interest crosses the routes) and only the leader answers.
    # A transfer done within a few ms would let the new leader take the same request as its own when
    # its copy arrives late, and answer (and step down) a second time (CI saw two answers): the
    # handover starts once the request has reached every server, as nats-server's takes ~1 s anyway.
    service.loop.call_later(limits.STEPDOWN_SETTLE_S, transfer)


def follow_when_moved(ajs: AccountJetStream, group: RaftGroup, left_s: float) -> None:
    """Once leadership has moved on, drop this server's interest in the asset's subjects at once
    (not at the cluster driver's next look): publishes and pulls then reach only the new leader."""
    if len(group.voters()) <= 1:
        return
    if not group.is_leader():
        ajs.follow_leaders()
    elif left_s > 0:  # the transfer is under way (or given up after an election timeout: still leading)
        ajs.call_later(STEPDOWN_POLL_S, lambda: follow_when_moved(ajs, group, left_s - STEPDOWN_POLL_S))


def voters_of(service: JetStreamService, group: RaftGroup) -> list[Voter]:
    """The group's voters with what the leader knows of their servers and their logs."""
    servers = {server.peer: server for server in service.meta.servers}
    seen = {peer.peer: peer for peer in group.peers()}
    driver = service.driver
    voters = []
    for peer in group.voters():
        server = servers.get(peer)
        follower = seen.get(peer)
        online = peer == service.peer or (driver is not None and not driver.offline(peer))
        voters.append(Voter(
            peer=peer,
            name=service.peer_names.get(peer, ""),
            cluster=server.cluster if server is not None else "",
            tags=server.tags if server is not None else (),
            online=online,
            seen_ago_s=follower.seen_ago_s if follower is not None else None,
            match=follower.match if follower is not None else 0,
            degraded=follower.degraded if follower is not None else False,
        ))
    return voters


class MetaStepDown:
    """`$JS.API.META.LEADER.STEPDOWN` in the system account, answered by the meta leader."""

    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        self.client: InternalClient | None = None

    def start(self) -> bool:
        server = self.service.server
        name = server.accounts.system_name
        account = server.accounts.get(name) if name else None
        if account is None:
            return False
        self.client = InternalClient(server, account, "JetStream meta step-down")
        self.client.subscribe(META_STEPDOWN_SUBJECT.encode(), self._on_request)
        return True

    def _on_request(self, _subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        meta = self.service.meta
        if not meta.is_leader() or meta.group is None:
            return  # the meta leader answers
        body = data[len(header):] if header is not None else data
        out: dict[str, object] = {"type": TYPE_PREFIX + "meta_leader_stepdown_response"}
        try:
            if needs_newer_api(header or b""):
                raise errors.REQUIRED_API_LEVEL.error()
            step_down(self.service, meta.group, body, "meta group")
            out["success"] = True
        except errors.JsApiError as exc:
            out["error"] = exc.as_json()
        if reply and self.client is not None and not self.client.closed:
            self.client.publish(reply, go_json(out))

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
