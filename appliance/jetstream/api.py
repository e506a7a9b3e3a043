"""The JetStream API on `$JS.API.>`: subject -> handler, strict request decoding, JSON responses
in nats-server's field order and omitempty rules.

Handlers run synchronously on the worker's loop. Changes to what exists (streams, consumers) are
proposed to the meta group; with one voter the proposal is durable and applied before `propose`
returns, so the handler answers at once. Unknown API subjects get no reply at all, as in
nats-server (clients time out).
"""

from __future__ import annotations

import base64
import logging
import string
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream import errors, ops
from appliance.jetstream.config import (
    CONSUMER_FIELDS,
    STREAM_FIELDS,
    ConsumerConfig,
    StreamConfig,
    parse_consumer_config,
    parse_stream_config,
)
from appliance.jetstream.decode import JsonObject, decode_object, request_body
from appliance.jetstream.subjects import is_literal, subject_matches, subjects_overlap
from appliance.jetstream.wire import go_json, header_value, rfc3339, status_headers

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

logger = logging.getLogger(__name__)

API_PREFIX = "$JS.API."
API_LEVEL = 5
TYPE_PREFIX = "io.nats.jetstream.api.v1."
CONSUMER_VERBS = ("CREATE", "DURABLE", "INFO", "DELETE", "NAMES", "LIST", "LEADER", "PAUSE", "UNPIN", "RESET")
API_SUBSCRIPTIONS = ("$JS.API.*", "$JS.API.STREAM.>", "$JS.API.META.>", "$JS.API.SERVER.>", "$JS.API.ACCOUNT.>",
                     *(f"$JS.API.CONSUMER.{verb}.>" for verb in CONSUMER_VERBS))
NAME_ALPHABET = string.ascii_letters + string.digits

Handler = Callable[["Request"], None]


class Request:
    """One API request: the account it arrived in, its subject tokens after $JS.API., and its body."""

    def __init__(self, ajs: AccountJetStream, tokens: list[str], reply: str, header: bytes, body: bytes) -> None:
        self.ajs = ajs
        self.tokens = tokens
        self.reply = reply
        self.header = header
        self.body = body
        self.counted = True  # nats-server leaves successful MSG.GETs out of its API total

    def respond(self, kind: str, fields: dict[str, object], *, error: errors.JsApiError | None = None,
                after_error: dict[str, object] | None = None, count_error: bool = True) -> None:
        out: dict[str, object] = {"type": TYPE_PREFIX + kind}
        if error is not None:
            out["error"] = error.as_json()
            if count_error:
                self.ajs.api_errors += 1
            out.update(after_error or {})
        else:
            out.update(fields)
        if self.reply:
            self.ajs.send(self.reply, go_json(out))

    def request_level(self) -> str:
        if not self.header:
            return "0"
        value = header_value(self.header, b"Nats-Required-Api-Level")
        return value.decode() if value else "0"


def subscribe_api(ajs: AccountJetStream) -> None:
    def on_request(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        body = data[len(header):] if header is not None else data
        dispatch(ajs, subject.decode(), reply.decode() if reply else "", header or b"", body)

    for subject in API_SUBSCRIPTIONS:
        ajs.client.subscribe(subject.encode(), on_request)
    for subject in ("$JS.ACK.>", "$JS.FC.>"):
        ajs.client.subscribe(subject.encode(), lambda s, r, h, d: on_ack_or_fc(ajs, s, r, h, d))
    if ajs.domain:
        ajs.client.subscribe(f"$JS.{ajs.domain}.API.>".encode(), lambda s, r, h, d: on_domain_request(ajs, s, r, h, d))


def on_domain_request(ajs: AccountJetStream, subject: bytes, reply: bytes | None, header: bytes | None,
                      data: bytes) -> None:
    """`$JS.<domain>.API.<...>` is `$JS.API.<...>` of this server's domain (nats-server maps it)."""
    rest = subject.decode().split(".", 3)[3]
    body = data[len(header):] if header is not None else data
    reply_text = reply.decode() if reply else ""
    tokens = rest.split(".")
    if tokens[:3] == ["CONSUMER", "MSG", "NEXT"] and len(tokens) == 5:
        consumer = _find_consumer(ajs, tokens[3], tokens[4])
        if consumer is not None:
            consumer.on_pull(reply_text, body)
        return
    if tokens[:2] == ["DIRECT", "GET"] and len(tokens) >= 3:
        stream = ajs.streams.get(tokens[2])
        if stream is not None and stream.config.allow_direct:
            direct_get(ajs, tokens[2], API_PREFIX + rest, reply_text, body)
        return
    dispatch(ajs, API_PREFIX + rest, reply_text, header or b"", body)


def on_ack_or_fc(ajs: AccountJetStream, subject: bytes, reply: bytes | None, header: bytes | None,
                 data: bytes) -> None:
    tokens = subject.decode().split(".")
    if tokens[1] == "FC":
        if len(tokens) >= 5:
            consumer = _find_consumer(ajs, tokens[2], tokens[3])
            if consumer is not None:
                consumer.on_flow_control_reply(subject.decode())
        return
    if len(tokens) == 9:
        stream_name, consumer_name = tokens[2], tokens[3]
    elif len(tokens) >= 11:
        stream_name, consumer_name = tokens[4], tokens[5]
    else:
        return
    consumer = _find_consumer(ajs, stream_name, consumer_name)
    if consumer is not None:
        body = data[len(header):] if header is not None else data
        consumer.on_ack(tokens, reply.decode() if reply else "", body)


def _find_consumer(ajs: AccountJetStream, stream_name: str, consumer_name: str):  # type: ignore[no-untyped-def]
    stream = ajs.streams.get(stream_name)
    return stream.consumers.get(consumer_name) if stream is not None else None


def dispatch(ajs: AccountJetStream, subject: str, reply: str, header: bytes, body: bytes) -> None:
    tokens = subject[len(API_PREFIX):].split(".")
    handler = _route(tokens)
    if handler is None:
        return
    request = Request(ajs, tokens, reply, header, body)
    level = request.request_level()
    if level.isdigit() and int(level) > API_LEVEL:
        kind = _kind_for(tokens)
        request.respond(kind, {}, error=errors.REQUIRED_API_LEVEL.error())
        return
    try:
        handler(request)
    except errors.JsApiError as exc:
        request.respond(_kind_for(tokens), {}, error=exc, after_error=_error_extras(tokens))
    finally:
        if request.counted:
            ajs.api_total += 1  # nats-server counts a request once it is answered


def _error_extras(tokens: list[str]) -> dict[str, object]:
    head = ".".join(tokens[:2])
    if head == "STREAM.INFO":
        return {"total": 0, "offset": 0, "limit": 0}
    if head in ("STREAM.NAMES", "STREAM.LIST"):
        return {"total": 0, "offset": 0, "limit": 0, "streams": None}
    if head in ("CONSUMER.NAMES", "CONSUMER.LIST"):
        return {"total": 0, "offset": 0, "limit": 0, "consumers": []}
    if head == "STREAM.PURGE":
        return {"purged": 0}
    return {}


KINDS = {
    "INFO": "account_info_response", "STREAM.CREATE": "stream_create_response",
    "STREAM.UPDATE": "stream_update_response", "STREAM.INFO": "stream_info_response",
    "STREAM.DELETE": "stream_delete_response", "STREAM.PURGE": "stream_purge_response",
    "STREAM.NAMES": "stream_names_response", "STREAM.LIST": "stream_list_response",
    "STREAM.MSG": "stream_msg_get_response", "STREAM.LEADER": "stream_leader_stepdown_response",
    "STREAM.PEER": "stream_remove_peer_response", "CONSUMER.CREATE": "consumer_create_response",
    "CONSUMER.DURABLE": "consumer_create_response", "CONSUMER.INFO": "consumer_info_response",
    "CONSUMER.DELETE": "consumer_delete_response", "CONSUMER.NAMES": "consumer_names_response",
    "CONSUMER.LIST": "consumer_list_response", "CONSUMER.LEADER": "consumer_leader_stepdown_response",
}


def _kind_for(tokens: list[str]) -> str:
    if tokens[:3] == ["STREAM", "MSG", "DELETE"]:
        return "stream_msg_delete_response"
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
        if count == 4 and verb in ("LEADER", "PEER") and tokens[2] in ("STEPDOWN", "REMOVE"):
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
            return cluster_required
    return None


def cluster_required(request: Request) -> None:
    raise errors.CLUSTER_REQUIRED.error()


def _body(request: Request) -> bytes:
    return request_body(request.body)


def _optional_object(request: Request, fields: dict[str, object], struct: str) -> JsonObject:
    body = _body(request)
    return decode_object(body, fields, struct) if body else {}  # type: ignore[arg-type]


# --- account -------------------------------------------------------------------------------------------

def account_info(request: Request) -> None:
    ajs = request.ajs
    memory = storage = consumers = 0
    for stream in ajs.streams.values():
        size = stream.store.state().bytes
        if stream.config.storage == "memory":
            memory += size
        else:
            storage += size
        consumers += len(stream.consumers)
    fields: dict[str, object] = {
        "memory": memory, "storage": storage, "reserved_memory": 0, "reserved_storage": 0,
        "streams": len(ajs.streams), "consumers": consumers,
        "limits": {"max_memory": -1, "max_storage": -1, "max_streams": -1, "max_consumers": -1,
                   "max_ack_pending": -1, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
                   "max_bytes_required": False},
    }
    if ajs.domain:
        fields["domain"] = ajs.domain
    fields["api"] = {"level": API_LEVEL, "total": ajs.api_total, "errors": ajs.api_errors}
    request.respond("account_info_response", fields)


# --- streams -------------------------------------------------------------------------------------------

def _stream(request: Request, name: str) -> Stream:
    stream = request.ajs.streams.get(name)
    if stream is None:
        raise errors.STREAM_NOT_FOUND.error()
    return stream


def _stream_config_request(request: Request) -> StreamConfig:
    name = request.tokens[2]
    body = _body(request)
    obj = decode_object(body, STREAM_FIELDS, "StreamConfig") if body else {}
    if obj.get("name") and obj["name"] != name:
        raise errors.STREAM_MISMATCH.error()
    obj.setdefault("name", name)
    return parse_stream_config(obj, request_level=request.request_level())


def _check_overlap(request: Request, config: StreamConfig) -> None:
    for other in request.ajs.streams.values():
        if other.config.name == config.name:
            continue
        for mine in config.subjects:
            if any(subjects_overlap(mine, theirs) for theirs in other.config.subjects):
                raise errors.STREAM_SUBJECT_OVERLAP.error()


def stream_create(request: Request) -> None:
    config = _stream_config_request(request)
    ajs = request.ajs
    existing = ajs.streams.get(config.name)
    if existing is not None:
        if existing.config.comparable() != config.comparable():
            raise errors.STREAM_NAME_EXISTS.error()
        request.respond("stream_create_response", {**stream_info(existing, cluster=False), "did_create": True})
        return
    _check_overlap(request, config)
    _propose(request, {"op": "stream_put", "acc": ajs.account.name, "config": config.storage_record(),
                       "created": ajs.now_ns()})
    stream = ajs.streams.get(config.name)
    if stream is None:
        why = ajs.service.failures.get((ajs.account.name, config.name), "stream could not be opened")
        raise errors.STREAM_CREATE.format(err=why)
    request.respond("stream_create_response", {**stream_info(stream, cluster=False), "did_create": True})


def stream_update(request: Request) -> None:
    config = _stream_config_request(request)
    ajs = request.ajs
    stream = _stream(request, config.name)
    old = stream.config
    if config.storage != old.storage:
        raise errors.STREAM_INVALID_CONFIG.format(err=errors.CONFIG_STORAGE_CHANGE)
    if old.sealed and not config.sealed:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not config.deny_delete:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration update can not cancel deny message "
                                                  "deletes")
    if old.deny_purge and not config.deny_purge:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration update can not cancel deny purge")
    if old.retention != config.retention:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration update can not change retention "
                                                  "policy")
    _check_overlap(request, config)
    _propose(request, {"op": "stream_put", "acc": ajs.account.name, "config": config.storage_record(),
                       "created": stream.created_ns})
    request.respond("stream_update_response", stream_info(ajs.streams[config.name], cluster=False))


INFO_FIELDS: dict[str, object] = {"deleted_details": "bool", "subjects_filter": "str", "offset": "int"}


def stream_info_handler(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    obj = _optional_object(request, INFO_FIELDS, "JSApiStreamInfoRequest")
    subjects_filter = str(obj.get("subjects_filter", ""))
    offset = int(str(obj.get("offset", 0)))
    info = stream_info(stream, deleted_details=bool(obj.get("deleted_details")), subjects_filter=subjects_filter,
                       offset=offset)
    total = info.pop("_total", 0)
    paging = {"total": total, "offset": offset if subjects_filter else 0,
              "limit": limits.JS_STREAM_INFO_SUBJECTS_MAX if subjects_filter else 0}
    request.respond("stream_info_response", {**paging, **info})


def stream_info(stream: Stream, *, deleted_details: bool = False, subjects_filter: str = "",
                offset: int = 0, dynamic_metadata: bool = True, cluster: bool = True) -> dict[str, object]:
    state = stream.store.state(with_deleted=deleted_details)
    out: dict[str, object] = {"messages": state.msgs, "bytes": state.bytes, "first_seq": state.first_seq,
                              "first_ts": rfc3339(state.first_ts_ns), "last_seq": state.last_seq,
                              "last_ts": rfc3339(state.last_ts_ns)}
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    total = 0
    if subjects_filter:
        counts = stream.store.subject_counts(subjects_filter)
        total = len(counts)
        names = sorted(counts)[offset:offset + limits.JS_STREAM_INFO_SUBJECTS_MAX]
        if names:
            out["subjects"] = {name: counts[name] for name in names}
    if state.num_deleted:
        out["num_deleted"] = state.num_deleted
        if deleted_details and state.deleted:
            out["deleted"] = list(state.deleted)
    out["consumer_count"] = len(stream.consumers)
    if state.msgs == 0:
        out["first_seq"] = state.last_seq + 1 if state.last_seq else 0
    info: dict[str, object] = {
        "config": stream.config.to_json(dynamic_metadata=dynamic_metadata),
        "created": rfc3339(stream.created_ns), "state": out,
    }
    if cluster:
        info["cluster"] = {"leader": stream.host.server_name}
    info["ts"] = rfc3339(stream.host.now_ns())
    if subjects_filter:
        info["_total"] = total
    return info


def stream_delete(request: Request) -> None:
    ajs = request.ajs
    stream = _stream(request, request.tokens[2])
    _propose(request, {"op": "stream_del", "acc": ajs.account.name, "stream": stream.config.name})
    request.respond("stream_delete_response", {"success": True})


PURGE_FIELDS: dict[str, object] = {"filter": "str", "seq": "uint", "keep": "uint"}


def stream_purge(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    obj = _optional_object(request, PURGE_FIELDS, "JSApiStreamPurgeRequest")
    if stream.config.sealed:
        raise errors.STREAM_SEALED.error()
    if stream.config.deny_purge:
        raise errors.STREAM_PURGE_FAILED.format(err=errors.PURGE_NOT_PERMITTED)
    if obj.get("seq") and obj.get("keep"):
        raise errors.BAD_REQUEST.error()
    body = {"filter": obj.get("filter", ""), "keep": obj.get("keep", 0), "seq": obj.get("seq", 0)}
    stream.propose_op(ops.KIND_PURGE, body,
                      lambda purged: request.respond("stream_purge_response", {"success": True, "purged": purged}))


PAGE_FIELDS: dict[str, object] = {"offset": "int", "subject": "str"}


def _streams_for(request: Request, obj: JsonObject) -> list[Stream]:
    subject = str(obj.get("subject", ""))
    streams = sorted(request.ajs.streams.values(), key=lambda s: s.config.name)
    if subject:
        streams = [s for s in streams if any(subjects_overlap(subject, own) for own in s.config.subjects)]
    return streams


def stream_names(request: Request) -> None:
    obj = _optional_object(request, PAGE_FIELDS, "JSApiStreamNamesRequest")
    streams = _streams_for(request, obj)
    offset = max(int(str(obj.get("offset", 0))), 0)
    page = limits.JS_API_PAGE_STREAMS_NAMES
    names = [s.config.name for s in streams[offset:offset + page]]
    request.respond("stream_names_response", {"total": len(streams), "offset": offset, "limit": page,
                                              "streams": names})


def stream_list(request: Request) -> None:
    obj = _optional_object(request, PAGE_FIELDS, "JSApiStreamListRequest")
    streams = _streams_for(request, obj)
    offset = max(int(str(obj.get("offset", 0))), 0)
    page = limits.JS_API_PAGE_STREAMS_LIST
    infos = [stream_info(s, dynamic_metadata=False, cluster=False) for s in streams[offset:offset + page]]
    request.respond("stream_list_response", {"total": len(streams), "offset": offset, "limit": page,
                                             "streams": infos})


MSG_GET_FIELDS: dict[str, object] = {"seq": "uint", "last_by_subj": "str", "next_by_subj": "str", "batch": "int",
                                     "max_bytes": "int", "start_time": "time", "multi_last": "strs",
                                     "up_to_seq": "uint", "up_to_time": "time"}


def msg_get(request: Request) -> None:
    stream = _stream(request, request.tokens[3])
    obj = _optional_object(request, MSG_GET_FIELDS, "JSApiMsgGetRequest")
    msg = _lookup(stream, obj)
    if msg is None:
        raise errors.NO_MESSAGE_FOUND.error()
    message: dict[str, object] = {"subject": msg.subject, "seq": msg.seq}
    if msg.headers:
        message["hdrs"] = base64.b64encode(msg.headers).decode()
    if msg.payload:
        message["data"] = base64.b64encode(msg.payload).decode()
    message["time"] = rfc3339(msg.timestamp_ns)
    request.counted = False
    request.respond("stream_msg_get_response", {"message": message})


def _lookup(stream: Stream, obj: JsonObject):  # type: ignore[no-untyped-def]
    seq = int(str(obj.get("seq", 0)))
    if obj.get("last_by_subj"):
        return stream.store.load_last(str(obj["last_by_subj"]))
    if obj.get("next_by_subj"):
        return stream.store.load_next(str(obj["next_by_subj"]), max(seq, 1))
    if seq:
        return stream.store.load(seq)
    return None


MSG_DELETE_FIELDS: dict[str, object] = {"seq": "uint", "no_erase": "bool"}


def msg_delete(request: Request) -> None:
    stream = _stream(request, request.tokens[3])
    obj = _optional_object(request, MSG_DELETE_FIELDS, "JSApiMsgDeleteRequest")
    if stream.config.sealed:
        raise errors.STREAM_SEALED.error()
    if stream.config.deny_delete:
        raise errors.STREAM_MSG_DELETE_FAILED.format(err=errors.MSG_DELETE_NOT_PERMITTED)
    seq = int(str(obj.get("seq", 0)))

    def done(removed: object) -> None:
        if removed:
            request.respond("stream_msg_delete_response", {"success": True})
        else:
            request.respond("stream_msg_delete_response", {}, error=errors.SEQUENCE_NOT_FOUND.format(seq=seq),
                            count_error=False)

    stream.propose_op(ops.KIND_DELETE, {"seq": seq, "erase": not obj.get("no_erase")}, done)


STREAM_HANDLERS: dict[str, Handler] = {
    "CREATE": stream_create, "UPDATE": stream_update, "INFO": stream_info_handler, "DELETE": stream_delete,
    "PURGE": stream_purge,
}


def _propose(request: Request, op: dict[str, object]) -> None:
    result: list[bool] = []
    request.ajs.service.meta.propose(op, result.append)
    if result != [True]:
        raise errors.STREAM_GENERAL.format(err="meta proposal was not committed")


# --- direct get ----------------------------------------------------------------------------------------

def direct_get(ajs: AccountJetStream, name: str, subject: str, reply: str, body: bytes) -> None:
    stream = ajs.streams.get(name)
    if stream is None or not reply:
        return
    prefix = f"$JS.API.DIRECT.GET.{name}."
    if subject.startswith(prefix):
        obj: JsonObject = {"last_by_subj": subject[len(prefix):]}
    else:
        text = request_body(body)
        if not text:
            ajs.send(reply, b"", header=status_headers(408, "Empty Request"))
            return
        try:
            obj = decode_object(text, MSG_GET_FIELDS, "JSApiMsgGetRequest")  # type: ignore[arg-type]
        except errors.JsApiError:
            ajs.send(reply, b"", header=status_headers(408, "Malformed Request"))
            return
    if obj.get("batch") or obj.get("multi_last"):
        _direct_batch(ajs, stream, reply, obj)
        return
    msg = _lookup(stream, obj)
    if msg is None:
        ajs.send(reply, b"", header=status_headers(404, "Message Not Found"))
        return
    ajs.send(reply, msg.payload, header=_direct_headers(stream, msg, []))


def _direct_headers(stream: Stream, msg, extra: list[tuple[str, str]]) -> bytes:  # type: ignore[no-untyped-def]
    from appliance.jetstream.wire import append_headers
    pairs = [("Nats-Stream", stream.config.name), ("Nats-Subject", msg.subject), ("Nats-Sequence", str(msg.seq)),
             ("Nats-Time-Stamp", rfc3339(msg.timestamp_ns)), *extra]
    return append_headers(msg.headers, pairs)


def _direct_batch(ajs: AccountJetStream, stream: Stream, reply: str, obj: JsonObject) -> None:
    store = stream.store
    batch = min(int(str(obj.get("batch") or limits.JS_DIRECT_BATCH_MAX)), limits.JS_DIRECT_BATCH_MAX)
    max_bytes = int(str(obj.get("max_bytes") or 0))
    msgs = []
    multi = obj.get("multi_last")
    if isinstance(multi, list):
        up_to = int(str(obj.get("up_to_seq") or 0)) or store.state().last_seq
        seqs: set[int] = set()
        for filter_subject in multi:
            for subject in store.subject_counts(str(filter_subject)):
                last = _last_at_or_below(stream, subject, up_to)
                if last is not None:
                    seqs.add(last)
        for seq in sorted(seqs)[:batch]:
            msg = store.load(seq)
            if msg is not None:
                msgs.append(msg)
        remaining_total = 0
    else:
        filter_subject = str(obj.get("next_by_subj") or ">")
        seq = max(int(str(obj.get("seq", 0))), 1)
        while len(msgs) < batch:
            msg = store.load_next(filter_subject, seq)
            if msg is None:
                break
            msgs.append(msg)
            seq = msg.seq + 1
        up_to = 0
        from appliance.jetstream.storeview import count_live
        remaining_total = count_live(store, seq, [filter_subject]) if msgs else 0
    if not msgs:
        ajs.send(reply, b"", header=status_headers(404, "Message Not Found"))
        return
    previous = 0
    sent_bytes = 0
    for index, msg in enumerate(msgs):
        pending = len(msgs) - index - 1 + remaining_total
        sent_bytes += len(msg.payload) + len(msg.headers)
        ajs.send(reply, msg.payload, header=_direct_headers(
            stream, msg, [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(previous))]))
        previous = msg.seq
        if max_bytes and sent_bytes >= max_bytes:
            break
    eob = [("Nats-Num-Pending", str(remaining_total)), ("Nats-Last-Sequence", str(previous))]
    if isinstance(multi, list):
        eob.append(("Nats-UpTo-Sequence", str(up_to)))
    ajs.send(reply, b"", header=status_headers(204, "EOB", eob))


def _last_at_or_below(stream: Stream, subject: str, up_to: int) -> int | None:
    last = stream.store.load_last(subject)
    if last is None:
        return None
    if last.seq <= up_to:
        return last.seq
    best = None
    seq = 1
    while True:
        msg = stream.store.load_next(subject, seq)
        if msg is None or msg.seq > up_to:
            return best
        best = msg.seq
        seq = msg.seq + 1


# --- consumers -------------------------------------------------------------------------------------------

CREATE_FIELDS: dict[str, object] = {"stream_name": "str", "config": "object", "action": ("", "create", "update"),
                                    "pedantic": "bool"}


def consumer_create(request: Request) -> None:
    tokens = request.tokens
    durable_api = tokens[1] == "DURABLE"
    stream_name = tokens[3] if durable_api else tokens[2]
    subject_name = tokens[4] if durable_api else (tokens[3] if len(tokens) >= 4 else "")
    subject_filter = ".".join(tokens[4:]) if not durable_api and len(tokens) >= 5 else ""
    body = _body(request)
    obj = decode_object(body, CREATE_FIELDS, "CreateConsumerRequest") if body else {}  # type: ignore[arg-type]
    if not obj.get("config") and "config" not in obj:
        raise errors.CONSUMER_CONFIG_REQUIRED.error()
    config_obj = decode_object(obj.get("config") or {}, CONSUMER_FIELDS, "ConsumerConfig")
    if obj.get("stream_name", stream_name) != stream_name:
        raise errors.STREAM_MISMATCH.error()
    stream = _stream(request, stream_name)
    durable = str(config_obj.get("durable_name", ""))
    name = str(config_obj.get("name", ""))
    if durable_api:
        if not durable:
            raise errors.CONSUMER_DURABLE_NAME_NOT_SET.error()
        if durable != subject_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.error()
    elif subject_name:
        if subject_filter:
            if config_obj.get("filter_subjects"):
                raise errors.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED.error()
            if config_obj.get("filter_subject") != subject_filter:
                raise errors.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH.error()
        if (durable and durable != subject_name) or (name and name != subject_name):
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.error()
    elif durable:
        raise errors.CONSUMER_EPHEMERAL_WITH_DURABLE.error()
    if subject_name:
        config_obj["name"] = subject_name
    elif not name:
        config_obj["name"] = "".join(request.ajs.rng.choice(NAME_ALPHABET) for _ in range(8))
    config = parse_consumer_config(config_obj, stream=stream.config, ephemeral=not durable,
                                   request_level=request.request_level())
    existing = stream.consumers.get(config.name)
    action = obj.get("action", "")
    if existing is not None:
        if existing.config.comparable() == config.comparable():
            request.respond("consumer_create_response", existing.info_json())
            return
        if action == "create":
            raise errors.CONSUMER_ALREADY_EXISTS.error()
        _check_update(existing.config, config)
    elif action == "update":
        raise errors.CONSUMER_DOES_NOT_EXIST.error()
    else:
        _check_new_consumer(stream, config)
    created = existing.created_ns if existing is not None else request.ajs.now_ns()
    _propose(request, {"op": "consumer_put", "acc": request.ajs.account.name, "stream": stream_name,
                       "config": config.to_json(dynamic_metadata=False), "created": created})
    request.respond("consumer_create_response", stream.consumers[config.name].info_json())


def _check_new_consumer(stream: Stream, config: ConsumerConfig) -> None:
    if 0 < stream.config.max_consumers <= len(stream.consumers):
        raise errors.MAXIMUM_CONSUMERS_LIMIT.error()
    if stream.config.retention != "workqueue":
        return
    mine = config.filters
    for other in stream.consumers.values():
        theirs = other.config.filters
        if not mine or not theirs:
            raise errors.CONSUMER_WQ_MULTIPLE_UNFILTERED.error()
        if any(subjects_overlap(a, b) for a in mine for b in theirs):
            raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE.error()


def _check_update(old: ConsumerConfig, new: ConsumerConfig) -> None:
    def fail(what: str) -> errors.JsApiError:
        return errors.CONSUMER_CREATE.format(err=f"consumer {what} can not be updated")

    if old.deliver_policy != new.deliver_policy:
        raise fail("deliver policy")
    if old.ack_policy != new.ack_policy:
        raise fail("ack policy")
    if old.replay_policy != new.replay_policy:
        raise fail("replay policy")
    if bool(old.deliver_subject) != bool(new.deliver_subject):
        raise fail("push vs pull mode")


def _consumer(request: Request, stream: Stream, name: str):  # type: ignore[no-untyped-def]
    consumer = stream.consumers.get(name)
    if consumer is None:
        raise errors.CONSUMER_NOT_FOUND.error()
    return consumer


def consumer_info(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    request.respond("consumer_info_response", _consumer(request, stream, request.tokens[3]).info_json())


def consumer_delete(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    consumer = _consumer(request, stream, request.tokens[3])
    _propose(request, {"op": "consumer_del", "acc": request.ajs.account.name, "stream": stream.config.name,
                       "consumer": consumer.name})
    request.respond("consumer_delete_response", {"success": True})


def consumer_names(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    obj = _optional_object(request, PAGE_FIELDS, "JSApiConsumersRequest")
    offset = max(int(str(obj.get("offset", 0))), 0)
    names = sorted(stream.consumers)
    page = limits.JS_API_PAGE_STREAMS_NAMES
    request.respond("consumer_names_response", {"total": len(names), "offset": offset, "limit": page,
                                                "consumers": names[offset:offset + page]})


def consumer_list(request: Request) -> None:
    stream = _stream(request, request.tokens[2])
    obj = _optional_object(request, PAGE_FIELDS, "JSApiConsumersRequest")
    offset = max(int(str(obj.get("offset", 0))), 0)
    names = sorted(stream.consumers)
    page = limits.JS_API_PAGE_STREAMS_LIST
    infos = []
    for name in names[offset:offset + page]:
        info = stream.consumers[name].info_json()
        config = info["config"]
        assert isinstance(config, dict)
        config["metadata"] = {k: v for k, v in stream.consumers[name].config.metadata.items()}
        infos.append(info)
    request.respond("consumer_list_response", {"total": len(names), "offset": offset, "limit": page,
                                               "consumers": infos})


__all__ = ["dispatch", "subscribe_api", "direct_get", "stream_info", "is_literal", "subject_matches"]
