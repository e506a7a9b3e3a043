"""Account info and the STREAM.* handlers: create, update, info, delete, purge, names, list,
msg get and msg delete, answered in nats-server's JSON."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream import advisories, errors, ops, resources, sources
from appliance.jetstream.cluster_info import asset_cluster
from appliance.jetstream.catalog import catalog
from appliance.jetstream.config import STREAM_TYPE, StreamConfig, parse_stream_config
from appliance.jetstream.decode import JsonObject, decode_into, parse_json
from appliance.jetstream.msg_get import lookup, parse_msg_get
from appliance.jetstream.republish import settle_update
from appliance.jetstream.request import (
    API_LEVEL,
    Request,
    optional_object,
    propose_meta,
    stream_of,
)
from appliance.jetstream.subjects import subjects_overlap
from appliance.jetstream.wire import rfc3339

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream


def account_info(request: Request) -> None:
    ajs = request.ajs
    usage = resources.account_usage(ajs)
    fields: dict[str, object] = {
        "memory": usage.memory,
        "storage": usage.storage,
        "reserved_memory": usage.reserved_memory,
        "reserved_storage": usage.reserved_storage,
        "streams": len(catalog(ajs)),
        "consumers": sum(len(stream.consumers) for stream in ajs.streams.values()),
        "limits": resources.limits_json(ajs),
    }
    if ajs.domain:
        fields["domain"] = ajs.domain
    fields["api"] = {"level": API_LEVEL, "total": ajs.api_total, "errors": ajs.api_errors}
    tiers = resources.tiers_json(ajs, list(catalog(ajs).values()))
    if tiers is not None:
        fields["tiers"] = tiers
    request.respond("account_info_response", fields)


def _decoded_config(request: Request) -> JsonObject:
    """The request body as nats-server's unmarshalRequest reads it (10025 on bad JSON)."""
    return decode_into(request.body, STREAM_TYPE, "StreamConfigRequest")


def _config_of(request: Request, obj: JsonObject) -> StreamConfig:
    streams = request.ajs.streams

    def others(name: str) -> StreamConfig | None:
        found = streams.get(name)
        return found.config if found is not None else None

    return parse_stream_config(
        obj, request_level=request.request_level(), others=others, clustered=request.ajs.service.meta.clustered
    )


def _create_config(request: Request) -> StreamConfig:
    """STREAM.CREATE's checks before the config's own, in nats-server's order."""
    obj = _decoded_config(request)
    name = request.tokens[2]
    if obj.get("name", "") != name:
        raise errors.STREAM_MISMATCH.error()
    if "/" in name or "\\" in name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS.error()
    if obj.get("sealed"):
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration for create can not be sealed")
    if obj.get("mirror_direct") and obj.get("mirror") is None:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream has no mirror but does have mirror direct")
    sent = _as_sent(obj, name)
    if name not in request.ajs.streams and sent.num_replicas <= 1:
        # the account and server limits, on the config as sent (nats-server 2.15.1 leaves them to
        # later for replicas > 1, which a single server then refuses with 10074)
        resources.check_stream_create(request.ajs, sent)
    return _config_of(request, obj)


def _as_sent(obj: JsonObject, name: str) -> StreamConfig:
    """The limit-relevant fields as the request sent them (nats-server checks the limits before
    it applies the config's defaults)."""
    sent = StreamConfig(name=name)
    for key in ("max_bytes", "max_consumers", "num_replicas"):
        if isinstance(obj.get(key), int):
            setattr(sent, key, obj[key])
    if obj.get("storage"):
        sent.storage = str(obj["storage"])
    else:
        sent.max_bytes = 0  # nats-server's unset storage type matches neither store: no bytes counted
    return sent


def _update_config(request: Request) -> StreamConfig:
    config = _config_of(request, _decoded_config(request))
    if config.name != request.tokens[2]:
        raise errors.STREAM_MISMATCH.error()
    return config


def _check_overlap(request: Request, config: StreamConfig) -> None:
    check_overlap(request.ajs, config)


def check_overlap(ajs: AccountJetStream, config: StreamConfig) -> None:
    """10065 when config's subjects overlap another stream's (create, update, restore)."""
    for other in catalog(ajs).values():
        if other.name == config.name:
            continue
        for mine in config.subjects:
            if any(subjects_overlap(mine, theirs) for theirs in other.subjects):
                raise errors.STREAM_SUBJECT_OVERLAP.error()


def stream_create(request: Request) -> None:
    config = _create_config(request)
    ajs = request.ajs
    existing = ajs.streams.get(config.name)
    if existing is not None:
        if existing.config.comparable() != config.comparable():
            raise errors.STREAM_NAME_EXISTS.error()
        info = stream_info(existing, cluster=asset_cluster(ajs.service, existing.group, standalone=False))
        request.respond("stream_create_response", {**info, "did_create": True})
        return
    resources.check_stream_create(ajs, config)  # again on the config as completed (addStream's check)
    sources.check_filters(config.mirror, config.sources)
    _check_overlap(request, config)

    clustered = ajs.service.meta.clustered

    def created() -> None:
        if clustered:  # the stream's first leader answers, once it takes publishes (service.py)
            advisories.stream_action(ajs, config.name, "create")
            return
        stream = ajs.streams.get(config.name)
        if stream is None:
            why = ajs.service.failures.get((ajs.account.name, config.name), "stream could not be opened")
            raise errors.STREAM_CREATE.format(err=why)
        advisories.stream_action(ajs, config.name, "create")
        info = stream_info(stream, cluster=asset_cluster(ajs.service, stream.group, standalone=False))
        request.respond("stream_create_response", {**info, "did_create": True})

    op = {
        "op": "stream_put", "acc": ajs.account.name, "config": config.storage_record(), "created": ajs.now_ns()
    }
    if clustered and request.reply:
        op["reply"] = request.reply
    propose_meta(request, op, created)


def stream_update(request: Request) -> None:
    config = _update_config(request)
    config.republish = settle_update(config.republish)
    ajs = request.ajs
    stream = stream_of(request, config.name)
    old = stream.config
    _check_update(old, config)
    resources.check_stream_update(ajs, old, config)
    _check_overlap(request, config)

    def updated() -> None:
        advisories.stream_action(ajs, config.name, "modify")
        current = stream_of(request, config.name)
        cluster = asset_cluster(ajs.service, current.group, standalone=False)
        request.respond("stream_update_response", stream_info(current, cluster=cluster))

    op = {
        "op": "stream_put", "acc": ajs.account.name, "config": config.storage_record(), "created": stream.created_ns
    }
    propose_meta(request, op, updated)


def _check_update(old: StreamConfig, config: StreamConfig) -> None:
    """nats-server's configUpdateCheck, in its order."""
    if config.storage != old.storage:
        raise errors.STREAM_INVALID_CONFIG.format(err=errors.CONFIG_STORAGE_CHANGE)
    if old.retention != config.retention:
        if "workqueue" in (old.retention, config.retention):
            raise errors.STREAM_INVALID_CONFIG.format(
                err="stream configuration update can not change retention policy to/from workqueue"
            )
        raise errors.STREAM_INVALID_CONFIG.format(  # nats-server allows limits <-> interest
            err="stream configuration update can not change retention policy between limits and interest "
            "on this server"
        )
    if old.sealed and not config.sealed:
        raise errors.STREAM_INVALID_CONFIG.format(
            err="stream configuration update can not unseal a sealed stream"
        )
    if old.deny_delete and not config.deny_delete:
        raise errors.STREAM_INVALID_CONFIG.format(
            err="stream configuration update can not cancel deny message deletes"
        )
    if old.deny_purge and not config.deny_purge:
        raise errors.STREAM_INVALID_CONFIG.format(err="stream configuration update can not cancel deny purge")
    sources.check_update(old.mirror, config.mirror)
    if old.allow_msg_ttl and not config.allow_msg_ttl:
        raise errors.STREAM_INVALID_CONFIG.format(err="message TTL status can not be disabled")
    if config.sealed:  # what sealing implies, as nats-server sets it
        config.max_age, config.discard = 0, "new"
        config.deny_delete = config.deny_purge = True
        config.allow_rollup_hdrs = False


INFO_FIELDS: dict[str, object] = {"deleted_details": "bool", "subjects_filter": "str", "offset": "int"}


def stream_info_handler(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    obj = optional_object(request, INFO_FIELDS, "JSApiStreamInfoRequest")
    subjects_filter = str(obj.get("subjects_filter", ""))
    offset = int(str(obj.get("offset", 0)))
    info = stream_info(
        stream,
        deleted_details=bool(obj.get("deleted_details")),
        subjects_filter=subjects_filter,
        offset=offset,
        cluster=asset_cluster(request.ajs.service, stream.group, standalone=True),
    )
    total = info.pop("_total", 0)
    paging = {
        "total": total,
        "offset": offset if subjects_filter else 0,
        "limit": limits.JS_STREAM_INFO_SUBJECTS_MAX if subjects_filter else 0,
    }
    request.respond("stream_info_response", {**paging, **info})


def stream_info(
    stream: Stream,
    *,
    deleted_details: bool = False,
    subjects_filter: str = "",
    offset: int = 0,
    dynamic_metadata: bool = True,
    cluster: dict[str, object] | None = None,
) -> dict[str, object]:
    """A stream's info; `cluster`: its block (cluster_info.asset_cluster), None to leave it out."""
    state = stream.store.state(with_deleted=deleted_details)
    out: dict[str, object] = {
        "messages": state.msgs,
        "bytes": state.bytes,
        "first_seq": state.first_seq,
        "first_ts": rfc3339(state.first_ts_ns),
        "last_seq": state.last_seq,
        "last_ts": rfc3339(state.last_ts_ns),
    }
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    total = 0
    if subjects_filter:
        counts = stream.store.subject_counts(subjects_filter)
        total = len(counts)
        names = sorted(counts)[offset : offset + limits.JS_STREAM_INFO_SUBJECTS_MAX]
        if names:
            out["subjects"] = {name: counts[name] for name in names}
    if state.num_deleted:
        out["num_deleted"] = state.num_deleted
        if deleted_details and state.deleted:
            out["deleted"] = list(state.deleted)
    lost = stream.store.lost()
    if lost.damaged:
        out["lost"] = advisories.lost_json(lost)
    out["consumer_count"] = len(stream.consumers)
    if state.msgs == 0:
        out["first_seq"] = state.last_seq + 1 if state.last_seq else 0
    info: dict[str, object] = {
        "config": stream.config.to_json(dynamic_metadata=dynamic_metadata),
        "created": rfc3339(stream.created_ns),
        "state": out,
    }
    if cluster is not None:
        info["cluster"] = cluster
    if stream.config.mirror:
        info["mirror"] = sources.mirror_info(stream)
    if stream.config.sources:
        info["sources"] = sources.info(stream)
    info["ts"] = rfc3339(stream.host.now_ns())
    if subjects_filter:
        info["_total"] = total
    return info


def stream_delete(request: Request) -> None:
    ajs = request.ajs
    stream = stream_of(request, request.tokens[2])
    op = {"op": "stream_del", "acc": ajs.account.name, "stream": stream.config.name}
    propose_meta(request, op, lambda: request.respond("stream_delete_response", {"success": True}))


PURGE_FIELDS: dict[str, object] = {"filter": "str", "seq": "uint", "keep": "uint"}


def stream_purge(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    obj = optional_object(request, PURGE_FIELDS, "JSApiStreamPurgeRequest")
    if stream.config.sealed:
        raise errors.STREAM_SEALED.error()
    if stream.config.deny_purge:
        raise errors.STREAM_PURGE_FAILED.format(err=errors.PURGE_NOT_PERMITTED)
    if obj.get("seq") and obj.get("keep"):
        raise errors.BAD_REQUEST.error()
    body = {"filter": obj.get("filter", ""), "keep": obj.get("keep", 0), "seq": obj.get("seq", 0)}
    result: list[object] = []
    answer = request.later(
        lambda: request.respond("stream_purge_response", {"success": True, "purged": result[0]})
    )
    stream.propose_op(ops.KIND_PURGE, body, lambda purged: (result.append(purged), answer()))


PAGE_FIELDS: dict[str, object] = {"offset": "int", "subject": "str"}


def _streams_for(request: Request, obj: JsonObject) -> list[StreamConfig]:
    subject = str(obj.get("subject", ""))
    configs = sorted(catalog(request.ajs).values(), key=lambda c: c.name)
    if subject:
        configs = [c for c in configs if any(subjects_overlap(subject, own) for own in c.subjects)]
    return configs


def stream_names(request: Request) -> None:
    obj = optional_object(request, PAGE_FIELDS, "JSApiStreamNamesRequest")
    streams = _streams_for(request, obj)
    offset = max(int(str(obj.get("offset", 0))), 0)
    page = limits.JS_API_PAGE_STREAMS_NAMES
    names = [c.name for c in streams[offset : offset + page]]
    request.respond(
        "stream_names_response", {"total": len(streams), "offset": offset, "limit": page, "streams": names}
    )


def stream_list(request: Request) -> None:
    obj = optional_object(request, PAGE_FIELDS, "JSApiStreamListRequest")
    streams = _streams_for(request, obj)
    offset = max(int(str(obj.get("offset", 0))), 0)
    page = limits.JS_API_PAGE_STREAMS_LIST
    infos = [_listed_info(request.ajs, c) for c in streams[offset : offset + page]]
    request.respond(
        "stream_list_response", {"total": len(streams), "offset": offset, "limit": page, "streams": infos}
    )


def _listed_info(ajs: AccountJetStream, config: StreamConfig) -> dict[str, object]:
    """A STREAM.LIST entry: the stream's info when held here; clustered, a stream held only by
    other servers is listed with its config and creation time (its state stays with them)."""
    stream = ajs.streams.get(config.name)
    if stream is not None:
        return stream_info(stream, dynamic_metadata=False,
                           cluster=asset_cluster(ajs.service, stream.group, standalone=False))
    record = ajs.service.meta.state.accounts.get(ajs.account.name, {}).get(config.name, {})
    created = int(str(record.get("created", 0)))
    return {"config": config.to_json(dynamic_metadata=False), "created": rfc3339(created),
            "state": {"messages": 0, "bytes": 0, "first_seq": 0, "first_ts": rfc3339(0), "last_seq": 0,
                      "last_ts": rfc3339(0), "consumer_count": 0},
            "ts": rfc3339(ajs.now_ns())}


def msg_get(request: Request) -> None:
    req = parse_msg_get(request.body)  # validated before the stream is looked up, as nats-server
    stream = stream_of(request, request.tokens[3])
    msg = lookup(stream, req)
    if msg is None:
        raise errors.NO_MESSAGE_FOUND.error()
    message: dict[str, object] = {"subject": msg.subject, "seq": msg.seq}
    if msg.headers and not req.no_hdr:
        message["hdrs"] = base64.b64encode(msg.headers).decode()
    if msg.payload:
        message["data"] = base64.b64encode(msg.payload).decode()
    message["time"] = rfc3339(msg.timestamp_ns)
    request.counted = False
    request.respond("stream_msg_get_response", {"message": message})


MSG_DELETE_FIELDS: dict[str, object] = {"seq": "uint", "no_erase": "bool"}


def msg_delete(request: Request) -> None:
    body = request.body.strip()
    if not body or parse_json(body) == {}:  # nats-server's isEmptyRequest, before the lookup
        raise errors.BAD_REQUEST.error()
    obj = optional_object(request, MSG_DELETE_FIELDS, "JSApiMsgDeleteRequest")
    stream = stream_of(request, request.tokens[3])
    if stream.config.sealed:
        raise errors.STREAM_SEALED.error()
    if stream.config.deny_delete:
        raise errors.STREAM_MSG_DELETE_FAILED.format(err=errors.MSG_DELETE_NOT_PERMITTED)
    seq = int(str(obj.get("seq", 0)))
    if stream.config.storage == "file":  # nats-server's file store errors outside its blocks
        state = stream.store.state()
        if seq == 0 or seq < state.first_seq:
            raise errors.STREAM_MSG_DELETE_FAILED.format(err="no message found")
        if seq > state.last_seq:
            raise errors.STREAM_MSG_DELETE_FAILED.format(err="stream store EOF")

    result: list[object] = []

    def done() -> None:
        if result[0]:
            request.respond("stream_msg_delete_response", {"success": True})
        else:
            request.respond(
                "stream_msg_delete_response",
                {},
                error=errors.SEQUENCE_NOT_FOUND.format(seq=seq),
                count_error=False,
            )

    answer = request.later(done)
    stream.propose_op(ops.KIND_DELETE, {"seq": seq, "erase": not obj.get("no_erase")},
                      lambda removed: (result.append(removed), answer()))
