"""`$JS.API.SERVER.REMOVE` in the system account: evict a server from the JetStream cluster.

`{"peer": "<server name>"}` or `{"peer_id": "<peer id>"}` (peer_id wins when both are given, as
nats-server). Only the meta leader answers, and only in the system account (other accounts get
no answer: nats-server does not subscribe it there). The eviction is one meta op
(`server_remove`, meta.py): once committed the server is never placed on again, the meta leader
re-places every stream that held it and then removes it from the meta group
(cluster_driver.py), and a removed server that comes back is refused with a log line until the
peer-remove timeout (5 minutes, `appliance { peer_remove_timeout }`) has passed since the removal;
then the meta leader adds it back (a `server_readd` op), as nats-server re-adds a removed peer it
hears from after its peerRemoveTimeout.
The reply is sent once the op is committed, as nats-server 2.15 answers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from appliance.jetstream import errors
from appliance.jetstream.decode import decode_object, request_body
from appliance.jetstream.request import TYPE_PREFIX
from appliance.jetstream.wire import go_json
from appliance.server.internal import InternalClient

if TYPE_CHECKING:
    from appliance.jetstream.service import JetStreamService

logger = logging.getLogger(__name__)

SUBJECT = "$JS.API.SERVER.REMOVE"
KIND = TYPE_PREFIX + "meta_server_remove_response"
FIELDS: dict[str, object] = {"peer": "str", "peer_id": "str"}


def subscribe_server_remove(service: JetStreamService) -> InternalClient | None:
    """The system account's subscription (clustered servers only); None without a system account."""
    registry = service.server.accounts
    account = registry.get(registry.system_name) if registry.system_name else None
    if account is None or not service.meta.clustered:
        return None
    client = InternalClient(service.server, account, "JetStream system API")

    def on_request(_subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if not service.meta.is_leader() or not reply:
            return
        body = request_body(data[len(header):] if header is not None else data)

        def answer(error: errors.JsApiError | None) -> None:
            out: dict[str, object] = {"type": KIND}
            if error is None:
                out["success"] = True
            else:
                out["error"] = error.as_json()
            client.publish(reply, go_json(out))

        try:
            peer = _target(service, body)
        except errors.JsApiError as exc:
            answer(exc)
            return
        logger.info("JetStream cluster: removing server %s (peer %s) from the cluster", service.peer_name(peer), peer)
        op = {"op": "server_remove", "peer": peer, "ts": service.clock.wall()}
        try:
            service.meta.propose(op, lambda ok: answer(None if ok else errors.STREAM_GENERAL.format(
                err="meta proposal was not committed")))
        except Exception as exc:  # noqa: BLE001 - refused at once (not the leader any more, full): answered
            answer(errors.STREAM_GENERAL.format(err=f"meta proposal was not accepted: {exc}"))

    client.subscribe(SUBJECT.encode(), on_request)
    return client


def _target(service: JetStreamService, body: bytes) -> str:
    """The peer id the request names among the meta group's voters; nats-server's errors otherwise."""
    if not body:
        raise errors.BAD_REQUEST.error()
    request = decode_object(body, FIELDS, "JSApiMetaServerRemoveRequest")
    peer_id, name = str(request.get("peer_id", "")), str(request.get("peer", ""))
    for voter in service.meta.voters():
        if peer_id:
            if voter == peer_id:
                return voter
        elif name and service.peer_name(voter) == name:
            return voter
    raise errors.CLUSTER_SERVER_NOT_MEMBER.error()
