"""`$JS.API.STREAM.PEER.REMOVE.<stream>` `{"peer": "<server name or peer id>"}` (the meta leader answers).

The peer leaves the stream's group and the meta leader places a replacement by the placement
rules (not the removed server, not one evicted by SERVER.REMOVE). Beyond nats-server (which
answers 503/10075 "peer remap failed" without a spare server): with no spare server the removal
still succeeds, the stream goes on on its remaining peers, under-replicated, and the meta leader
re-places it when a server becomes available (cluster_driver.py). The membership change is one
meta op (`stream_peers`); the stream's servers carry it out (membership.py).
"""

from __future__ import annotations

from appliance.jetstream import errors
from appliance.jetstream.decode import decode_object
from appliance.jetstream.regroup import excluded_of, peers_of, regrouped
from appliance.jetstream.request import Request, body_of, propose_meta

PEER_REMOVE_FIELDS: dict[str, object] = {"peer": "str"}


def stream_peer_remove(request: Request) -> None:
    ajs = request.ajs
    service = ajs.service
    if not service.meta.clustered:
        raise errors.CLUSTER_REQUIRED.error()
    body = body_of(request)
    if not body:
        raise errors.BAD_REQUEST.error()
    wanted = str(decode_object(body, PEER_REMOVE_FIELDS, "JSApiStreamRemovePeerRequest").get("peer", ""))
    if not wanted:
        raise errors.BAD_REQUEST.error()
    name = request.tokens[3]
    record = service.meta.state.accounts.get(ajs.account.name, {}).get(name)
    if record is None:
        raise errors.STREAM_NOT_FOUND.error()
    group = record.get("group")
    peers = peers_of(group)
    removed = next((peer for peer in peers if wanted in (peer, service.peer_name(peer))), None)
    if removed is None or not isinstance(group, dict):
        raise errors.CLUSTER_PEER_NOT_MEMBER.error()
    config = record["config"]
    assert isinstance(config, dict)
    remaining = [peer for peer in peers if peer != removed]
    replacement = service.meta.replacements(config, remaining, 1, exclude=frozenset({removed}))
    new_peers = [*remaining, *replacement]
    if not new_peers:  # an R1 stream's only peer, and no server to move it to
        raise errors.PEER_REMAP_FAILED.error()
    changed = regrouped(group, new_peers)
    changed["excluded"] = sorted({*excluded_of(group), removed})  # not re-placed here until it restarts
    op = {"op": "stream_peers", "acc": ajs.account.name, "stream": name, "group": changed}
    propose_meta(request, op, lambda: request.respond("stream_remove_peer_response", {"success": True}))
