"""The CONSUMER.* handlers: create (every subject form), info, delete, names and list."""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream import advisories, errors, pause, resources
from appliance.jetstream.api_streams import PAGE_FIELDS
from appliance.jetstream.cluster_info import asset_cluster
from appliance.jetstream.config import CONSUMER_FIELDS, GROUP_NAME, ConsumerConfig, parse_consumer_config
from appliance.jetstream.consumer import ResetRefused
from appliance.jetstream.decode import Kind, decode_object, parse_json
from appliance.jetstream.request import Request, body_of, optional_object, propose_meta, stream_of
from appliance.jetstream.subjects import subjects_overlap
from appliance.jetstream.wire import ZERO_TIME, parse_rfc3339

if TYPE_CHECKING:
    from appliance.jetstream.consumer import Consumer
    from appliance.jetstream.service import JetStreamService
    from appliance.jetstream.stream import Stream

NAME_ALPHABET = string.ascii_letters + string.digits


CREATE_FIELDS: dict[str, object] = {
    "stream_name": "str",
    "config": "object",
    "action": ("", "create", "update"),
    "pedantic": "bool",
}


def consumer_create(request: Request) -> None:
    tokens = request.tokens
    durable_api = tokens[1] == "DURABLE"
    stream_name = tokens[3] if durable_api else tokens[2]
    subject_name = tokens[4] if durable_api else (tokens[3] if len(tokens) >= 4 else "")
    subject_filter = ".".join(tokens[4:]) if not durable_api and len(tokens) >= 5 else ""
    body = body_of(request)
    obj = decode_object(body, CREATE_FIELDS, "CreateConsumerRequest") if body else {}  # type: ignore[arg-type]
    if not obj.get("config") and "config" not in obj:
        raise errors.CONSUMER_CONFIG_REQUIRED.error()
    config_obj = decode_object(obj.get("config") or {}, CONSUMER_FIELDS, "ConsumerConfig")
    if obj.get("stream_name", stream_name) != stream_name:
        raise errors.STREAM_MISMATCH.error()
    stream = stream_of(request, stream_name)
    durable = str(config_obj.get("durable_name", ""))
    name = str(config_obj.get("name", ""))
    if durable_api:
        if not durable:
            raise errors.CONSUMER_DURABLE_NAME_NOT_SET.error()
        if durable != subject_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.error()
    elif subject_name:
        # nats-server: the subject's name wins over config.name; only a durable_name must match
        if durable and durable != subject_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.error()
        if subject_filter:
            if config_obj.get("filter_subjects"):
                raise errors.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED.error()
            if config_obj.get("filter_subject") != subject_filter:
                raise errors.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH.error()
    elif durable:
        raise errors.CONSUMER_EPHEMERAL_WITH_DURABLE.error()
    if subject_name:
        config_obj["name"] = subject_name
    elif not name:
        config_obj["name"] = "".join(request.ajs.rng.choice(NAME_ALPHABET) for _ in range(8))
    config = parse_consumer_config(
        config_obj, stream=stream.config, ephemeral=not durable, request_level=request.request_level(),
        clustered=request.ajs.service.meta.clustered,
    )
    pause.normalise(config)
    if config.sample_freq:
        advisories.sample_percent(config.sample_freq)
    existing = stream.consumers.get(config.name)
    pause.keep_pause(config, existing)
    resources.check_consumer(
        request.ajs, stream, config, config_obj.get("max_ack_pending"), new=existing is None
    )
    action = obj.get("action", "")
    if existing is not None:
        if existing.config.comparable() == config.comparable():
            request.respond("consumer_create_response", info_of(existing, request.ajs.service))
            return
        if action == "create":
            raise errors.CONSUMER_ALREADY_EXISTS.error()
        if stream.config.retention == "workqueue":
            _check_workqueue_unique(stream, config)
        _check_update(request, existing.config, config)
    elif action == "update":
        raise errors.CONSUMER_DOES_NOT_EXIST.error()
    else:
        _check_new_consumer(stream, config)
    created = existing.created_ns if existing is not None else request.ajs.now_ns()

    def put() -> None:
        consumer = stream.consumers.get(config.name)
        if consumer is None:  # the stream went away before the consumer could open on it
            raise errors.CONSUMER_CREATE.format(err="stream was removed")
        if existing is None:
            advisories.consumer_action(request.ajs, stream_name, config.name, "create")
            pause.announce_created(consumer)
        if consumer.replicated:  # answered once its leader takes pull requests
            request.ajs.when_led(consumer.group, request.later(
                lambda: request.respond("consumer_create_response", info_of(consumer, request.ajs.service))))
            return
        request.respond("consumer_create_response", info_of(consumer, request.ajs.service))

    op = {
        "op": "consumer_put",
        "acc": request.ajs.account.name,
        "stream": stream_name,
        "config": config.to_json(dynamic_metadata=False),
        "created": created,
    }
    propose_meta(request, op, put)


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


def _check_workqueue_unique(stream: Stream, config: ConsumerConfig) -> None:
    """An update of a work queue consumer: its new filters may not collide with another's
    (nats-server partitionUnique; a consumer without filters collides with every filter)."""
    for partition in config.filters:
        for name, other in stream.consumers.items():
            if name == config.name:
                continue
            theirs = other.config.filters
            if not theirs or any(subjects_overlap(partition, f) for f in theirs):
                raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE.error()


def _check_update(request: Request, old: ConsumerConfig, new: ConsumerConfig) -> None:
    """What an update may not change, in nats-server's order and words (checkNewConsumerConfig;
    answered as 10012 with the text, or the error's own code)."""

    def fail(text: str) -> errors.JsApiError:
        return errors.CONSUMER_CREATE.format(err=text)

    def start_ns(text: str) -> int | None:
        return parse_rfc3339(text) if text else None

    fixed = [
        (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
        (old.mem_storage != new.mem_storage, "storage type can not be updated"),
        (old.direct != new.direct, "direct can not be updated"),
        (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
        (start_ns(old.opt_start_time) != start_ns(new.opt_start_time), "start time can not be updated"),
        (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
        (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
        (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
        (old.flow_control != new.flow_control, "flow control can not be updated"),
    ]
    for changed, text in fixed:
        if changed:
            raise fail(text)
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise fail("can not update push consumer to pull based")
        if request.ajs.has_interest(old.deliver_subject):
            raise errors.CONSUMER_NAME_EXISTS.error()
    if old.max_waiting != new.max_waiting:
        raise fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF.error()


def _consumer(request: Request, stream: Stream, name: str) -> Consumer:
    consumer = stream.consumers.get(name)
    if consumer is None:
        raise errors.CONSUMER_NOT_FOUND.error()
    return consumer


def consumer_info(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    consumer = _consumer(request, stream, request.tokens[3])
    consumer.after_acks(lambda: request.respond("consumer_info_response", info_of(consumer, request.ajs.service)))


def consumer_delete(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    consumer = _consumer(request, stream, request.tokens[3])
    op = {
        "op": "consumer_del",
        "acc": request.ajs.account.name,
        "stream": stream.config.name,
        "consumer": consumer.name,
    }
    propose_meta(request, op, lambda: request.respond("consumer_delete_response", {"success": True}))


def consumer_names(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    obj = optional_object(request, PAGE_FIELDS, "JSApiConsumersRequest")
    offset = max(int(str(obj.get("offset", 0))), 0)
    names = sorted(stream.consumers)
    page = limits.JS_API_PAGE_STREAMS_NAMES
    request.respond(
        "consumer_names_response",
        {"total": len(names), "offset": offset, "limit": page, "consumers": names[offset : offset + page]},
    )


UNPIN_FIELDS: dict[str, Kind] = {"group": "str"}


def consumer_unpin(request: Request) -> None:
    """`$JS.API.CONSUMER.UNPIN.<stream>.<consumer>` with `{"group"}`, checked in nats-server's
    order. No client is ever pinned here (pinned_client is refused), so a valid request only
    answers and sends the UNPINNED advisory, as nats-server does when nobody is pinned."""
    parsed = parse_json(request.body.strip())  # a lenient decode there: unknown fields are ignored
    known = {k: v for k, v in parsed.items() if k in UNPIN_FIELDS} if isinstance(parsed, dict) else parsed
    obj = decode_object(known, UNPIN_FIELDS, "JSApiConsumerUnpinRequest")
    group = str(obj.get("group") or "")
    if not group:
        raise errors.INVALID_JSON.format(err="consumer group not specified")
    if GROUP_NAME.fullmatch(group) is None:
        raise errors.CONSUMER_INVALID_GROUP_NAME.error()
    stream = stream_of(request, request.tokens[2])
    consumer = stream.consumers.get(request.tokens[3])
    if consumer is None:
        raise errors.CONSUMER_NOT_FOUND.error()
    if group not in consumer.config.priority_groups:
        raise errors.CONSUMER_INVALID_PRIORITY_GROUP.error()
    advisories.consumer_unpinned(request.ajs, stream.config.name, consumer.name, group, "admin")
    request.respond("consumer_unpin_response", {})


RESET_FIELDS: dict[str, Kind] = {"seq": "uint"}


def consumer_reset(request: Request) -> None:
    """`$JS.API.CONSUMER.RESET.<stream>.<consumer>` with an optional `{"seq"}` (none or 0: back
    to just above the ack floor). nats-server answers on the consumer's own subscription: for a
    stream or consumer that does not exist nobody answers, and the request is neither counted
    nor audited as an API request."""
    request.counted = False
    request.audited = False
    stream = request.ajs.streams.get(request.tokens[2])
    consumer = stream.consumers.get(request.tokens[3]) if stream is not None else None
    if consumer is None or not request.reply:
        return
    obj: dict[str, object] = {}
    if request.body:  # Go's json.Unmarshal: unknown fields are ignored, a wrong type is 10025
        parsed = parse_json(request.body)
        known = {k: v for k, v in parsed.items() if k in RESET_FIELDS} if isinstance(parsed, dict) else parsed
        obj = decode_object(known, RESET_FIELDS, "JSApiConsumerResetRequest") if known is not None else {}
    reset: list[int] = []

    def answer() -> None:  # from the commit callback: the info shows the reset state
        fields = info_of(consumer, request.ajs.service)
        fields["reset_seq"] = reset[0]
        request.respond("consumer_reset_response", fields)

    try:
        reset.append(consumer.reset_to(int(str(obj.get("seq") or 0)), done=request.later(answer)))
    except ResetRefused as exc:
        request.deferred = False
        raise errors.CONSUMER_INVALID_RESET.format(err=str(exc)) from None


def info_of(consumer: Consumer, service: JetStreamService) -> dict[str, object]:
    """A consumer's info as the API answers it: its cluster block after num_pending when
    clustered (nats-server adds none on a standalone server), and its priority group's state
    last, as nats-server reports a consumer with priority_groups (the first group; nothing pinned)."""
    info = consumer.info_json()
    cluster = asset_cluster(service, consumer.group, standalone=False)
    if cluster is not None:
        at = list(info).index("num_pending") + 1
        items = list(info.items())
        info = dict([*items[:at], ("cluster", cluster), *items[at:]])
    if consumer.config.priority_groups:
        info["priority_groups"] = [{"group": consumer.config.priority_groups[0], "pinned_ts": ZERO_TIME}]
    return info


def consumer_list(request: Request) -> None:
    stream = stream_of(request, request.tokens[2])
    obj = optional_object(request, PAGE_FIELDS, "JSApiConsumersRequest")
    offset = max(int(str(obj.get("offset", 0))), 0)
    names = sorted(stream.consumers)
    page = limits.JS_API_PAGE_STREAMS_LIST
    infos = []
    for name in names[offset : offset + page]:
        info = info_of(stream.consumers[name], request.ajs.service)
        config = info["config"]
        assert isinstance(config, dict)
        config["metadata"] = {k: v for k, v in stream.consumers[name].config.metadata.items()}
        infos.append(info)
    request.respond(
        "consumer_list_response", {"total": len(names), "offset": offset, "limit": page, "consumers": infos}
    )
