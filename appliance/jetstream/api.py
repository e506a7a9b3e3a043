"""The JetStream API on `$JS.API.>`: which subject goes to which handler, the subscriptions that
make the API, acks and flow-control replies reach this server, and nats-server's envelope rules
(error extras, API counters, required API level).

Handlers run on the worker's loop. Changes to what exists (streams, consumers) are proposed to
the meta group and answered from its commit callback (request.py: `propose_meta`), whether the
quorum is this server alone or remote peers. Unknown API subjects get no reply at all, as in
nats-server (clients time out).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.jetstream import errors
from appliance.jetstream.api_consumers import (
    consumer_create,
    consumer_delete,
    consumer_info,
    consumer_list,
    consumer_names,
    consumer_reset,
    consumer_unpin,
)
from appliance.jetstream.api_streams import (
    account_info,
    msg_delete,
    msg_get,
    stream_create,
    stream_delete,
    stream_info_handler,
    stream_list,
    stream_names,
    stream_purge,
    stream_update,
)
from appliance.jetstream.api_peers import stream_peer_remove
from appliance.jetstream.backup import stream_snapshot
from appliance.jetstream.direct import direct_get
from appliance.jetstream.pause import PAUSE_EXTRAS, consumer_pause
from appliance.jetstream.responder import LEADERLESS_DELAY_S, LEADER_POLL_S, Answer, responder
from appliance.jetstream.restore import stream_restore
from appliance.jetstream.stepdown import consumer_leader_stepdown, stream_leader_stepdown
from appliance.jetstream.request import API_LEVEL, API_PREFIX, TYPE_PREFIX, Request, needs_newer_api
from appliance.jetstream.wire import go_json
from appliance.server.internal import InternalClient

if TYPE_CHECKING:
    from appliance.jetstream.consumer import Consumer
    from appliance.jetstream.service import AccountJetStream

logger = logging.getLogger(__name__)

CONSUMER_VERBS = ("CREATE", "DURABLE", "INFO", "DELETE", "NAMES", "LIST", "LEADER", "PAUSE", "UNPIN", "RESET")
API_SUBSCRIPTIONS = (
    "$JS.API.*",
    "$JS.API.STREAM.>",
    "$JS.API.META.>",
    "$JS.API.SERVER.>",
    "$JS.API.ACCOUNT.>",
    *(f"$JS.API.CONSUMER.{verb}.>" for verb in CONSUMER_VERBS),
)

Handler = Callable[[Request], None]


def subscribe_api(ajs: AccountJetStream) -> None:
    def on_request(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        body = data[len(header) :] if header is not None else data
        dispatch(ajs, subject.decode(), reply.decode() if reply else "", header or b"", body)

    for subject in API_SUBSCRIPTIONS:
        ajs.client.subscribe(subject.encode(), on_request)
    for subject in ("$JS.ACK.>", "$JS.FC.>"):
        ajs.client.subscribe(subject.encode(), functools.partial(on_ack_or_fc, ajs))
    if ajs.domain:
        ajs.client.subscribe(
            f"$JS.{ajs.domain}.API.>".encode(), lambda s, r, h, d: on_domain_request(ajs, s, r, h, d)
        )


def answer_not_enabled(client: InternalClient) -> InternalClient:
    """In an account without JetStream, API requests get 503/10039 (as nats-server answers)."""

    def on_request(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        tokens = subject.decode()[len(API_PREFIX) :].split(".")
        if reply and _route(tokens) is not None:
            body = {
                "type": TYPE_PREFIX + _kind_for(tokens),
                "error": errors.NOT_ENABLED_FOR_ACCOUNT.error().as_json(),
                **_error_extras(tokens),  # as its other errors: `total`, `streams`, `purged`, ...
            }
            client.publish(reply, go_json(body))

    for subject in API_SUBSCRIPTIONS:
        client.subscribe(subject.encode(), on_request)
    return client


def on_domain_request(
    ajs: AccountJetStream, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes
) -> None:
    """`$JS.<domain>.API.<...>` is `$JS.API.<...>` of this server's domain (nats-server maps it)."""
    rest = subject.decode().split(".", 3)[3]
    body = data[len(header) :] if header is not None else data
    reply_text = reply.decode() if reply else ""
    tokens = rest.split(".")
    if tokens[:3] == ["CONSUMER", "MSG", "NEXT"] and len(tokens) == 5:
        consumer = _find_consumer(ajs, tokens[3], tokens[4])
        if consumer is not None:
            consumer.on_pull(reply_text, body, header or b"")
        return
    if tokens[:2] == ["DIRECT", "GET"] and len(tokens) >= 3:
        stream = ajs.streams.get(tokens[2])
        if stream is not None and stream.config.allow_direct:
            direct_get(ajs, tokens[2], API_PREFIX + rest, reply_text, body, header or b"")
        return
    dispatch(ajs, API_PREFIX + rest, reply_text, header or b"", body)


def on_ack_or_fc(
    ajs: AccountJetStream, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes
) -> None:
    raw = subject.split(b".")
    if raw[1] == b"FC":
        if len(raw) >= 5:
            consumer = _find_consumer(ajs, raw[2].decode(), raw[3].decode())
            if consumer is not None:
                consumer.on_flow_control_reply(subject.decode())
        return
    count = len(raw)
    if count == 9:
        offset = 4
    elif count >= 11:
        offset = 6
    else:
        return
    consumer = ajs.consumer_for_ack(raw[offset - 2], raw[offset - 1])
    if consumer is None:
        return
    body = data[len(header) :] if header is not None else data
    if not body or body == b"+ACK":  # the hot path: a plain ack, no tokens decoded
        consumer.on_plain_ack(raw[offset + 1], raw[offset + 2], reply)
        return
    tokens = subject.decode().split(".")
    consumer.on_ack(tokens, reply.decode() if reply else "", body)


def _find_consumer(ajs: AccountJetStream, stream_name: str, consumer_name: str) -> Consumer | None:
    stream = ajs.streams.get(stream_name)
    return stream.consumers.get(consumer_name) if stream is not None else None


def dispatch(ajs: AccountJetStream, subject: str, reply: str, header: bytes, body: bytes, *,
             waited_s: float = 0.0) -> None:
    tokens = subject[len(API_PREFIX) :].split(".")
    handler = _route(tokens)
    if handler is None:
        return
    answer = responder(ajs, tokens)
    if answer is Answer.SILENT:
        return  # another server of the cluster answers (responder.py)
    if answer in (Answer.LEADERLESS, Answer.NOT_READY):
        # wait for a leader (up to LEADERLESS_DELAY_S): this server answers at once if it becomes a
        # ready leader meanwhile (a leadership transfer), stays silent if another one leads
        if waited_s >= LEADERLESS_DELAY_S:
            _leaderless(ajs, tokens, reply, header, body)
            return
        waited = waited_s + LEADER_POLL_S
        ajs.call_later(LEADER_POLL_S, lambda: dispatch(ajs, subject, reply, header, body, waited_s=waited))
        return
    request = Request(ajs, tokens, reply, header, body)
    if answer is Answer.UNAVAILABLE:
        request.respond(_kind_for(tokens), {}, error=errors.CLUSTER_NOT_AVAILABLE.error(),
                        after_error=_error_extras(tokens))
        return
    _handle(request, handler, tokens, header)


def _leaderless(ajs: AccountJetStream, tokens: list[str], reply: str, header: bytes, body: bytes) -> None:
    """A replica's answer for a group still without a leader (or a new leader still not ready to
    answer): a stream's info as held here, 10008 for anything else."""
    answer = responder(ajs, tokens)
    if answer is Answer.SILENT:
        return  # a leader appeared meanwhile: it answered
    handler = _route(tokens)
    if handler is None:
        return
    request = Request(ajs, tokens, reply, header, body)
    waiting = answer in (Answer.LEADERLESS, Answer.NOT_READY)
    if answer is Answer.UNAVAILABLE or (waiting and tokens[:2] != ["STREAM", "INFO"]):
        request.respond(_kind_for(tokens), {}, error=errors.CLUSTER_NOT_AVAILABLE.error(),
                        after_error=_error_extras(tokens))
        return
    _handle(request, handler, tokens, header)


def _handle(request: Request, handler: Handler, tokens: list[str], header: bytes) -> None:
    if needs_newer_api(header):
        kind = _kind_for(tokens)
        request.respond(kind, {}, error=errors.REQUIRED_API_LEVEL.error())
        return
    kind, extras = _kind_for(tokens), _error_extras(tokens)
    request.on_error = lambda exc: request.respond(kind, {}, error=exc, after_error=extras)
    request.run(lambda: handler(request))


def _error_extras(tokens: list[str]) -> dict[str, object]:
    head = ".".join(tokens[:2])
    if head == "STREAM.INFO":
        return {"total": 0, "offset": 0, "limit": 0}
    if head == "STREAM.NAMES":
        return {"total": 0, "offset": 0, "limit": 0, "streams": None}
    if head == "STREAM.LIST":  # nats-server starts its list answer with an empty list, errors included
        return {"total": 0, "offset": 0, "limit": 0, "streams": []}
    if head in ("CONSUMER.NAMES", "CONSUMER.LIST"):
        return {"total": 0, "offset": 0, "limit": 0, "consumers": []}
    if head == "STREAM.PURGE":
        return {"purged": 0}
    if head == "CONSUMER.PAUSE":
        return dict(PAUSE_EXTRAS)
    if head == "STREAM.RESTORE":
        return {"deliver_subject": ""}
    return {}


KINDS = {
    "INFO": "account_info_response",
    "STREAM.CREATE": "stream_create_response",
    "STREAM.UPDATE": "stream_update_response",
    "STREAM.INFO": "stream_info_response",
    "STREAM.DELETE": "stream_delete_response",
    "STREAM.PURGE": "stream_purge_response",
    "STREAM.NAMES": "stream_names_response",
    "STREAM.LIST": "stream_list_response",
    "STREAM.MSG": "stream_msg_get_response",
    "STREAM.LEADER": "stream_leader_stepdown_response",
    "STREAM.PEER": "stream_remove_peer_response",
    "STREAM.SNAPSHOT": "stream_snapshot_response",
    "STREAM.RESTORE": "stream_restore_response",
    "STREAM.PEER.EVACUATE": "stream_evacuate_peer_response",
    "STREAM.CANCEL_MOVE": "stream_cancel_move_response",
    "CONSUMER.CREATE": "consumer_create_response",
    "CONSUMER.DURABLE": "consumer_create_response",
    "CONSUMER.INFO": "consumer_info_response",
    "CONSUMER.DELETE": "consumer_delete_response",
    "CONSUMER.NAMES": "consumer_names_response",
    "CONSUMER.LIST": "consumer_list_response",
    "CONSUMER.LEADER": "consumer_leader_stepdown_response",
    "CONSUMER.PAUSE": "consumer_pause_response",
    "CONSUMER.UNPIN": "consumer_unpin_response",
    "CONSUMER.RESET": "consumer_reset_response",
}


def _kind_for(tokens: list[str]) -> str:
    if tokens[:3] == ["STREAM", "MSG", "DELETE"]:
        return "stream_msg_delete_response"
    if ".".join(tokens[:3]) in KINDS:
        return KINDS[".".join(tokens[:3])]
    return KINDS.get(".".join(tokens[:2]), KINDS.get(tokens[0], "error_response"))


def _route(tokens: list[str]) -> Handler | None:
    count = len(tokens)
    head = tokens[0]
    if head == "INFO" and count == 1:
        return account_info
    if head == "STREAM" and count >= 2:
        verb = tokens[1]
        if verb in ("NAMES", "LIST") and count == 2:
            return stream_names if verb == "NAMES" else stream_list
        if count == 3 and verb in STREAM_HANDLERS:
            return STREAM_HANDLERS[verb]
        if count == 4 and verb == "MSG" and tokens[2] in ("GET", "DELETE"):
            return msg_get if tokens[2] == "GET" else msg_delete
        if count == 4 and (verb, tokens[2]) == ("LEADER", "STEPDOWN"):
            return stream_leader_stepdown
        if count == 4 and (verb, tokens[2]) == ("PEER", "REMOVE"):
            return stream_peer_remove
        if count == 4 and (verb, tokens[2]) in CLUSTER_VERBS:
            return cluster_required
        if count == 3 and verb == "CANCEL_MOVE":
            return cluster_required
        return None
    if head == "CONSUMER" and count >= 3:
        verb = tokens[1]
        if verb == "CREATE":
            return consumer_create
        if verb == "DURABLE" and count == 5 and tokens[2] == "CREATE":
            return consumer_create
        if verb in ("NAMES", "LIST") and count == 3:
            return consumer_names if verb == "NAMES" else consumer_list
        if verb in ("INFO", "DELETE") and count == 4:
            return consumer_info if verb == "INFO" else consumer_delete
        if verb == "LEADER" and count == 5 and tokens[2] == "STEPDOWN":
            return consumer_leader_stepdown
        if verb == "PAUSE" and count == 4:
            return consumer_pause
        if verb == "UNPIN" and count == 4:
            return consumer_unpin
        if verb == "RESET" and count == 4:
            return consumer_reset
    return None


CLUSTER_VERBS = (("PEER", "REMOVE"), ("PEER", "EVACUATE"))  # step-down: stepdown.py


def cluster_required(request: Request) -> None:
    raise errors.CLUSTER_REQUIRED.error()


STREAM_HANDLERS: dict[str, Handler] = {
    "CREATE": stream_create,
    "UPDATE": stream_update,
    "INFO": stream_info_handler,
    "DELETE": stream_delete,
    "PURGE": stream_purge,
    "SNAPSHOT": stream_snapshot,
    "RESTORE": stream_restore,
}

__all__ = ["API_LEVEL", "dispatch", "subscribe_api", "direct_get"]
