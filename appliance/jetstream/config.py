"""StreamConfig and ConsumerConfig: decoding, nats-server's defaults and checks, and the echo.

`parse_stream_config` / `parse_consumer_config` take a checked JSON object (decode.py) and return
a config with nats-server's defaults applied, or raise JsApiError with nats-server's code and
text. `to_json()` renders the config with nats-server's field order and omitempty rules.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from appliance.jetstream import errors
from appliance.jetstream.decode import (
    BOOL,
    DURATION,
    INT,
    INT32,
    INT64,
    STRING,
    STRING_MAP,
    STRINGS,
    UINT64,
    TIME,
    GoEnum,
    GoSlice,
    GoStruct,
    GoType,
    JsonObject,
    Kind,
    Node,
    enum_of,
    kind_word,
)
from appliance.jetstream.sources import SOURCE_TYPE, parse_mirror, parse_sources
from appliance.jetstream.stream_checks import Lookup, check_stream_config
from appliance.jetstream.subjects import is_valid_name, is_valid_subject, subjects_overlap
from appliance.jetstream.wire import parse_rfc3339, rfc3339

NS = 1_000_000_000
DEFAULT_DUPLICATE_WINDOW_NS = 120 * NS
MIN_WINDOW_NS = 100_000_000  # 100ms: max_age, duplicate_window, idle_heartbeat floors
DEFAULT_ACK_WAIT_NS = 30 * NS
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_INACTIVE_THRESHOLD_NS = 5 * NS
NAME_LENGTH_MAX = 255
DESCRIPTION_BYTES_MAX = 4096
REQUEST_LEVEL_KEY = "_nats.req.level"

def _compression(raw: bytes, node: Node) -> object:
    """StoreCompression's UnmarshalJSON: a JSON string, "s2" or "none"."""
    if node.kind not in ("str", "null"):
        raise ValueError(f"json: cannot unmarshal {kind_word(node)} into Go value of type string")
    if node.value not in ("s2", "none"):
        raise ValueError("unknown compression algorithm")
    return node.value


def _priority_policy(raw: bytes, node: Node) -> object:
    """PriorityPolicy's UnmarshalJSON ("none" is the default, kept as "")."""
    names = {b'"overflow"': "overflow", b'"pinned_client"': "pinned_client", b'"prioritized"': "prioritized"}
    if raw == b'"none"':
        return ""
    if raw not in names:
        raise ValueError(f"unknown priority policy: {raw.decode('utf-8', errors='replace')}")
    return names[raw]


TRANSFORM_TYPE = GoStruct("server.SubjectTransformConfig", {"src": STRING, "dest": STRING}, pointer=True)
STREAM_TYPE = GoStruct(
    "server.StreamConfigRequest",
    {
        "name": STRING,
        "description": STRING,
        "subjects": STRINGS,
        "retention": GoEnum("server.RetentionPolicy", enum_of("limits", "interest", "workqueue")),
        "max_consumers": INT,
        "max_msgs": INT64,
        "max_bytes": INT64,
        "max_age": DURATION,
        "max_msgs_per_subject": INT64,
        "max_msg_size": INT32,
        "discard": GoEnum("server.DiscardPolicy", enum_of("old", "new", fold=True)),
        "storage": GoEnum("server.StorageType", enum_of("file", "memory")),
        "num_replicas": INT,
        "no_ack": BOOL,
        "duplicate_window": DURATION,
        "placement": GoStruct(
            "server.Placement", {"cluster": STRING, "tags": STRINGS, "preferred": STRING}, pointer=True
        ),
        "mirror": SOURCE_TYPE,
        "sources": GoSlice(SOURCE_TYPE, "[]*server.StreamSource"),
        "compression": GoEnum("server.StoreCompression", _compression),
        "first_seq": UINT64,
        "subject_transform": TRANSFORM_TYPE,
        "republish": GoStruct(
            "server.RePublish", {"src": STRING, "dest": STRING, "headers_only": BOOL}, pointer=True
        ),
        "allow_direct": BOOL,
        "mirror_direct": BOOL,
        "discard_new_per_subject": BOOL,
        "sealed": BOOL,
        "deny_delete": BOOL,
        "deny_purge": BOOL,
        "allow_rollup_hdrs": BOOL,
        "consumer_limits": GoStruct(
            "server.StreamConsumerLimits", {"inactive_threshold": DURATION, "max_ack_pending": INT}
        ),
        "allow_msg_ttl": BOOL,
        "subject_delete_marker_ttl": DURATION,
        "allow_msg_counter": BOOL,
        "allow_atomic": BOOL,
        "allow_msg_schedules": BOOL,
        "persist_mode": GoEnum("server.PersistModeType", enum_of("default", "async", empty="default")),
        "allow_batched": BOOL,
        "metadata": STRING_MAP,
        "pedantic": BOOL,
    },
)


# ConsumerConfig's Go types (the decoder's type errors name them); the policies parse as their
# UnmarshalJSON does.
CONSUMER_FIELDS: dict[str, Kind | GoType] = {
    "durable_name": STRING,
    "name": STRING,
    "description": STRING,
    "deliver_policy": GoEnum(
        "server.DeliverPolicy",
        enum_of("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject",
                aliases={"undefined": "all"}),
    ),
    "opt_start_seq": UINT64,
    "opt_start_time": TIME,
    "ack_policy": GoEnum("server.AckPolicy", enum_of("none", "all", "explicit")),
    "ack_wait": DURATION,
    "max_deliver": INT,
    "backoff": GoSlice(DURATION, "[]time.Duration"),
    "filter_subject": STRING,
    "filter_subjects": STRINGS,
    "replay_policy": GoEnum("server.ReplayPolicy", enum_of("instant", "original")),
    "rate_limit_bps": UINT64,
    "sample_freq": STRING,
    "max_waiting": INT,
    "max_ack_pending": INT,
    "flow_control": BOOL,
    "headers_only": BOOL,
    "max_batch": INT,
    "max_expires": DURATION,
    "max_bytes": INT,
    "deliver_subject": STRING,
    "deliver_group": STRING,
    "idle_heartbeat": DURATION,
    "inactive_threshold": DURATION,
    "num_replicas": INT,
    "mem_storage": BOOL,
    "direct": BOOL,
    "metadata": STRING_MAP,
    "pause_until": TIME,
    "priority_groups": STRINGS,
    "priority_policy": GoEnum("server.PriorityPolicy", _priority_policy),
    "priority_timeout": DURATION,
}


# Accepted by the decoder (clients send them) but refused when set, after nats-server's checks:
# never silently ignored.
UNSUPPORTED_STREAM_FEATURES = (
    "subject_delete_marker_ttl",
    "allow_msg_counter",
    "allow_atomic",
    "allow_msg_schedules",
    "allow_batched",
)


def _get(obj: JsonObject, key: str, default: object) -> object:
    value = obj.get(key)
    return default if value is None else value


@dataclass(slots=True)
class StreamConfig:
    name: str
    subjects: list[str] = field(default_factory=list)
    description: str = ""
    retention: str = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = 0
    placement: dict[str, object] | None = None
    compression: str = "none"
    first_seq: int = 0
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: dict[str, object] = field(default_factory=dict)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    metadata: dict[str, str] = field(default_factory=dict)
    sources: list[dict[str, object]] = field(default_factory=list)  # sources.py
    mirror: dict[str, object] | None = None  # sources.py
    subject_transform: dict[str, str] | None = None  # transform.py, applied by the service
    republish: dict[str, object] | None = None  # republish.py, applied by the stream

    def to_json(self, *, dynamic_metadata: bool = True) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.subjects or not (self.sources or self.mirror):
            out["subjects"] = list(self.subjects)
        out.update(
            retention=self.retention,
            max_consumers=self.max_consumers,
            max_msgs=self.max_msgs,
            max_bytes=self.max_bytes,
            max_age=self.max_age,
            max_msgs_per_subject=self.max_msgs_per_subject,
            max_msg_size=self.max_msg_size,
            discard=self.discard,
            storage=self.storage,
            num_replicas=self.num_replicas,
        )
        if self.mirror:
            out["mirror"] = dict(self.mirror)
        if self.sources:
            out["sources"] = [dict(source) for source in self.sources]
        if self.no_ack:
            out["no_ack"] = True
        if self.duplicate_window or not (self.sources or self.mirror):
            out["duplicate_window"] = self.duplicate_window
        if self.placement is not None:
            out["placement"] = self.placement
        out["compression"] = self.compression
        if self.subject_transform is not None:
            out["subject_transform"] = dict(self.subject_transform)
        if self.first_seq:
            out["first_seq"] = self.first_seq
        if self.republish is not None:
            out["republish"] = dict(self.republish)
        out.update(allow_direct=self.allow_direct, mirror_direct=self.mirror_direct)
        if self.discard_new_per_subject:
            out["discard_new_per_subject"] = True
        out.update(
            sealed=self.sealed,
            deny_delete=self.deny_delete,
            deny_purge=self.deny_purge,
            allow_rollup_hdrs=self.allow_rollup_hdrs,
            consumer_limits=dict(self.consumer_limits),
            allow_msg_ttl=self.allow_msg_ttl,
        )
        if self.subject_delete_marker_ttl:
            out["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        metadata = with_dynamic_metadata(self.metadata) if dynamic_metadata else dict(self.metadata)
        if metadata:
            out["metadata"] = dict(sorted(metadata.items()))
        return out

    def storage_record(self) -> dict[str, object]:
        return self.to_json(dynamic_metadata=False)

    def comparable(self) -> dict[str, object]:
        """The config without server-stamped metadata: what "the same configuration" means."""
        out = self.storage_record()
        metadata = {k: v for k, v in self.metadata.items() if not k.startswith("_nats.")}
        out["metadata"] = metadata
        return out


def with_dynamic_metadata(metadata: dict[str, str]) -> dict[str, str]:
    from appliance import NATS_VERSION  # the version nats-server would stamp

    result = dict(metadata)
    result.setdefault(REQUEST_LEVEL_KEY, "0")
    result["_nats.level"] = "5"
    result["_nats.ver"] = NATS_VERSION
    return result


def _bad_config(text: str) -> errors.JsApiError:
    return errors.STREAM_INVALID_CONFIG.format(err=text)


SETTABLE = (
    "description",
    "retention",
    "max_consumers",
    "max_msgs",
    "max_bytes",
    "max_age",
    "max_msgs_per_subject",
    "max_msg_size",
    "discard",
    "storage",
    "num_replicas",
    "no_ack",
    "duplicate_window",
    "compression",
    "first_seq",
    "allow_direct",
    "mirror_direct",
    "discard_new_per_subject",
    "sealed",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
    "allow_msg_ttl",
    "subject_delete_marker_ttl",
)


def parse_stream_config(
    obj: JsonObject, *, request_level: str = "0", others: Lookup | None = None, clustered: bool = False
) -> StreamConfig:
    """A StreamConfig (decoded against STREAM_TYPE) with nats-server's defaults applied and its
    checks passed in its order (stream_checks.py); `others` looks up the account's streams."""
    config = StreamConfig(name=str(_get(obj, "name", "")))
    for key in SETTABLE:
        if obj.get(key) is not None:
            setattr(config, key, obj[key])
    subjects = obj.get("subjects")
    config.subjects = list(subjects) if isinstance(subjects, list) else []
    config.mirror = parse_mirror(obj.get("mirror"))
    config.sources = parse_sources(obj.get("sources"))  # type: ignore[assignment]
    transform = obj.get("subject_transform")
    if isinstance(transform, dict):
        src, dest = str(transform.get("src") or ""), str(transform.get("dest") or "")
        config.subject_transform = {"src": src, "dest": dest}
    placement = obj.get("placement")
    config.placement = dict(placement) if isinstance(placement, dict) else None
    limits_obj = obj.get("consumer_limits")
    if isinstance(limits_obj, dict):
        config.consumer_limits = {k: v for k, v in limits_obj.items() if v}
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        config.metadata = {k: v for k, v in metadata.items() if not k.startswith("_nats.")}
    config.metadata[REQUEST_LEVEL_KEY] = request_level
    republish = obj.get("republish")
    config.republish = dict(republish) if isinstance(republish, dict) else None  # checked in stream_checks
    check_stream_config(config, pedantic=bool(obj.get("pedantic")), others=others)
    _check_supported(config, obj, clustered=clustered)
    return config


def _check_supported(config: StreamConfig, obj: JsonObject, *, clustered: bool) -> None:
    """What this server does not do (after nats-server's own checks), and replicas > 1 alone."""
    for unsupported in UNSUPPORTED_STREAM_FEATURES:
        if obj.get(unsupported):
            raise _bad_config(f"stream {unsupported} is not supported by this server")
    if obj.get("persist_mode") == "async":
        raise _bad_config("stream persist_mode async is not supported by this server")
    if config.num_replicas > 1 and not clustered:
        raise errors.REPLICAS_NOT_SUPPORTED.error()


def stream_config_from_record(record: dict[str, object]) -> StreamConfig:
    """A stored (already validated) config back into its dataclass."""
    names = {f.name for f in dataclasses.fields(StreamConfig)}
    values = {k: v for k, v in record.items() if k in names}
    config = StreamConfig(**values)  # type: ignore[arg-type]
    return config


# --- consumers -------------------------------------------------------------------------------------

CONSUMER_ECHO_ORDER = (
    "durable_name",
    "name",
    "description",
    "deliver_policy",
    "opt_start_seq",
    "opt_start_time",
    "ack_policy",
    "ack_wait",
    "max_deliver",
    "backoff",
    "filter_subject",
    "filter_subjects",
    "replay_policy",
    "rate_limit_bps",
    "sample_freq",
    "max_waiting",
    "max_ack_pending",
    "flow_control",
    "headers_only",
    "max_batch",
    "max_expires",
    "max_bytes",
    "deliver_subject",
    "deliver_group",
    "idle_heartbeat",
    "inactive_threshold",
    "num_replicas",
    "mem_storage",
    "direct",
    "metadata",
    "pause_until",
    "priority_groups",
    "priority_policy",
    "priority_timeout",
)
ALWAYS_ECHOED = ("deliver_policy", "ack_policy", "replay_policy", "num_replicas")


@dataclass(slots=True)
class ConsumerConfig:
    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: int = 0
    opt_start_time: str = ""
    ack_policy: str = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: list[int] = field(default_factory=list)
    filter_subject: str = ""
    filter_subjects: list[str] = field(default_factory=list)
    replay_policy: str = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    pause_until: str = ""
    priority_groups: list[str] = field(default_factory=list)
    priority_policy: str = ""  # "" is nats-server's none (left out of the JSON)
    priority_timeout: int = 0  # the pinned TTL, ns

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def filters(self) -> list[str]:
        if self.filter_subjects:
            return list(self.filter_subjects)
        return [self.filter_subject] if self.filter_subject else []

    def to_json(self, *, dynamic_metadata: bool = True) -> dict[str, object]:
        out: dict[str, object] = {}
        for key in CONSUMER_ECHO_ORDER:
            value = getattr(self, key)
            if key == "metadata":
                value = with_dynamic_metadata(value) if dynamic_metadata else dict(value)
                value = dict(sorted(value.items()))
            if value or key in ALWAYS_ECHOED:
                out[key] = list(value) if isinstance(value, list) else value
        return out

    def comparable(self) -> dict[str, object]:
        out = self.to_json(dynamic_metadata=False)
        out["metadata"] = {k: v for k, v in self.metadata.items() if not k.startswith("_nats.")}
        return out


def _invalid_policy(text: str) -> errors.JsApiError:
    return errors.CONSUMER_INVALID_POLICY.format(err=text)


def parse_consumer_config(
    obj: JsonObject, *, stream: StreamConfig, ephemeral: bool, request_level: str = "0", clustered: bool = False
) -> ConsumerConfig:
    """A ConsumerConfig with nats-server's defaults (setConsumerConfigRecoveryDefaults) and checks."""
    config = ConsumerConfig()
    for key, value in obj.items():
        setattr(config, key, list(value) if isinstance(value, list) else value)
    _parse_priority(config)
    config.metadata = {k: v for k, v in config.metadata.items() if not k.startswith("_nats.")}
    if config.priority_policy or config.priority_timeout or config.priority_groups:
        request_level = str(max(int(request_level) if request_level.isdigit() else 0, 1))  # API level 1
    config.metadata[REQUEST_LEVEL_KEY] = request_level
    if config.opt_start_time:
        try:
            parse_rfc3339(config.opt_start_time)
        except ValueError:
            raise errors.INVALID_JSON.format(
                err=f'parsing time "{config.opt_start_time}" as RFC3339'
            ) from None
    _apply_consumer_defaults(config, stream, ephemeral=ephemeral)  # before the checks, as nats-server
    _check_consumer(config, stream, clustered=clustered)
    return config


# nats-server's "zero defaults": a negative value of these is their none
_NONE_WHEN_NEGATIVE = ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat",
                       "inactive_threshold")


def _apply_consumer_defaults(config: ConsumerConfig, stream: StreamConfig, *, ephemeral: bool) -> None:
    """nats-server's setConsumerConfigDefaults (not pedantic): out-of-range values become their
    'none', then the defaults; ack_wait and backoff keep their sign for the checks."""
    limits = stream.consumer_limits
    if config.max_deliver == 0 or config.max_deliver < -1:
        config.max_deliver = -1
    for key in _NONE_WHEN_NEGATIVE:
        if getattr(config, key) < 0:
            setattr(config, key, 0)
    if config.max_ack_pending < -1:
        config.max_ack_pending = -1
    if not config.is_push and config.max_waiting == 0:
        config.max_waiting = DEFAULT_MAX_WAITING
    if config.ack_wait == 0 and config.ack_policy != "none":
        config.ack_wait = DEFAULT_ACK_WAIT_NS
    if config.backoff:
        config.ack_wait = config.backoff[0]
    limit = limits.get("max_ack_pending")
    if config.max_ack_pending == 0 and isinstance(limit, int) and limit > 0:
        config.max_ack_pending = limit
    if config.max_ack_pending == 0 and config.ack_policy != "none":
        config.max_ack_pending = DEFAULT_MAX_ACK_PENDING
    if ephemeral and config.inactive_threshold == 0:
        limit = limits.get("inactive_threshold")
        config.inactive_threshold = (
            int(limit) if isinstance(limit, int) and limit > 0 else DEFAULT_INACTIVE_THRESHOLD_NS
        )
    if config.opt_start_time:
        config.opt_start_time = rfc3339(parse_rfc3339(config.opt_start_time))


PRIORITY_POLICIES = ("overflow", "pinned_client", "prioritized")
GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")
PINNED_TTL_DEFAULT_NS = 120 * 1_000_000_000  # nats-server's JsDefaultPinnedTTL


def _parse_priority(config: ConsumerConfig) -> None:
    """priority_policy as nats-server decodes it ("none" is the default, left out when echoed),
    and its defaults: a negative priority_timeout is 0, pinned_client's is 2 minutes."""
    policy = config.priority_policy
    if policy == "none":
        config.priority_policy = ""
    elif policy and policy not in PRIORITY_POLICIES:
        raise errors.INVALID_JSON.format(err=f'unknown priority policy: "{policy}"')
    if config.priority_timeout < 0:
        config.priority_timeout = 0
    if config.priority_policy == "pinned_client" and not config.priority_timeout:
        config.priority_timeout = PINNED_TTL_DEFAULT_NS


def _check_priority(config: ConsumerConfig) -> None:
    if config.priority_policy:
        if config.is_push:
            raise errors.CONSUMER_PUSH_WITH_PRIORITY_GROUP.error()
        if not config.priority_groups:
            raise errors.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP.error()
        for group in config.priority_groups:
            if not group:
                raise errors.CONSUMER_EMPTY_GROUP_NAME.error()
            if GROUP_NAME.fullmatch(group) is None:
                raise errors.CONSUMER_INVALID_GROUP_NAME.error()
        if config.priority_policy == "pinned_client":
            # Deliveries would need the Nats-Pin-Id header and the 423 / UNPIN protocol: refused,
            # never accepted and silently run as another policy.
            raise errors.STREAM_INVALID_CONFIG.format(
                err="consumer priority policy pinned_client is not supported by this server"
            )
    elif config.priority_groups:
        raise errors.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE.error()
    elif config.priority_timeout > 0:
        raise errors.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY.error()


def _check_consumer(config: ConsumerConfig, stream: StreamConfig, *, clustered: bool) -> None:
    """The request's name checks, then nats-server's checkConsumerCfg in its order and texts
    (on the config with its defaults), then addConsumer's work queue checks."""
    for name in (config.durable_name, config.name):
        if name and ("/" in name or "\\" in name):
            raise errors.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS.error()
    for name, what in ((config.name, "consumer name"), (config.durable_name, "consumer durable name")):
        if name and not is_valid_name(name):
            raise errors.STREAM_INVALID_CONFIG.format(err=f"{what} can not contain '.', '*', '>', '\\', '/'")
    if config.num_replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE.error()
    if config.num_replicas > 1 and not clustered:
        raise errors.REPLICAS_NOT_SUPPORTED.error()
    if any(delay < 0 for delay in config.backoff):
        raise errors.CONSUMER_BACKOFF_NEGATIVE.error()
    if config.ack_wait < 0:
        raise errors.CONSUMER_ACK_WAIT_NEGATIVE.error()
    if config.backoff and config.max_deliver != -1 and len(config.backoff) > config.max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF.error()
    if len(config.description) > DESCRIPTION_BYTES_MAX:
        raise errors.CONSUMER_DESCRIPTION_TOO_LONG.format(max=DESCRIPTION_BYTES_MAX)
    _check_delivery(config, stream)
    _check_filters(config)
    _check_start(config)
    if config.flow_control and not config.idle_heartbeat:
        raise errors.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS.error()
    if config.durable_name and config.name and config.durable_name != config.name:
        raise errors.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH.error()
    _check_priority(config)
    if stream.retention == "workqueue":
        if config.ack_policy != "explicit":
            raise errors.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK.error()
        if config.deliver_policy != "all":
            raise errors.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL.error()
    # nats-server checks a durable's length when it makes the consumer; an ephemeral's long name
    # fails there as 10012 "error creating store" on a file stream (the file name): 10102 here
    for name in (config.durable_name, config.name):
        if len(name) > NAME_LENGTH_MAX:
            raise errors.CONSUMER_NAME_TOO_LONG.format(max=NAME_LENGTH_MAX)


def _check_delivery(config: ConsumerConfig, stream: StreamConfig) -> None:
    if config.is_push:
        tokens = config.deliver_subject.split(".")
        if "*" in tokens or ">" in tokens:
            raise errors.CONSUMER_DELIVER_TO_WILDCARDS.error()
        if not is_valid_subject(config.deliver_subject):
            raise errors.CONSUMER_INVALID_DELIVER_SUBJECT.error()
        if config.max_waiting:
            raise errors.CONSUMER_PUSH_MAX_WAITING.error()
        if config.max_ack_pending > 0 and config.ack_policy == "none":
            raise errors.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED.error()
        if 0 < config.idle_heartbeat < MIN_WINDOW_NS:
            raise errors.CONSUMER_SMALL_HEARTBEAT.error()
    else:
        if config.ack_policy == "none" and stream.retention == "workqueue":
            raise errors.CONSUMER_PULL_REQUIRES_ACK.error()
        if config.rate_limit_bps > 0:
            raise errors.CONSUMER_PULL_WITH_RATE_LIMIT.error()
        if config.idle_heartbeat > 0:
            raise errors.CONSUMER_HB_REQUIRES_PUSH.error()
        if config.flow_control:
            raise errors.CONSUMER_FC_REQUIRES_PUSH.error()
        if 0 < config.max_expires < 1_000_000:
            raise errors.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL.error()


def _check_start(config: ConsumerConfig) -> None:
    policy = config.deliver_policy
    lead = f"consumer delivery policy is deliver {_policy_words(policy)}, but optional"
    if policy == "by_start_sequence":
        if not config.opt_start_seq:
            raise _invalid_policy(f"{lead} start sequence is not set")
        if config.opt_start_time:
            raise _invalid_policy(f"{lead} start time is also set")
        return
    if policy == "by_start_time":
        if not config.opt_start_time:
            raise _invalid_policy(f"{lead} start time is not set")
        if config.opt_start_seq:  # nats-server's text says "start" twice
            raise _invalid_policy(f"{lead} start start sequence is also set")
        return
    if config.opt_start_seq:
        raise _invalid_policy(
            f"consumer delivery policy is deliver {_policy_words(policy)}, but optional start "
            "sequence is also set"
        )
    if config.opt_start_time:
        raise _invalid_policy(
            f"consumer delivery policy is deliver {_policy_words(policy)}, but optional start "
            "time is also set"
        )
    if policy == "last_per_subject" and not config.filters:
        raise _invalid_policy(
            "consumer delivery policy is deliver last per subject, but optional filter subject is not set"
        )


def _policy_words(policy: str) -> str:
    return {
        "all": "all",
        "last": "last",
        "new": "new",
        "last_per_subject": "last per subject",
        "by_start_sequence": "by start sequence",
        "by_start_time": "by start time",
    }[policy]


def _check_filters(config: ConsumerConfig) -> None:
    if config.filter_subject and config.filter_subjects:
        raise errors.CONSUMER_DUPLICATE_FILTER_SUBJECTS.error()
    if config.filter_subject and not is_valid_subject(config.filter_subject):
        raise errors.STREAM_INVALID_CONFIG.format(err="invalid subject")
    if any(not subject for subject in config.filter_subjects):
        raise errors.CONSUMER_EMPTY_FILTER.error()
    filters = config.filters
    for subject in filters:
        if not is_valid_subject(subject):
            raise errors.STREAM_INVALID_CONFIG.format(err="invalid subject")
    for index, subject in enumerate(filters):
        for other in filters[index + 1 :]:
            if subjects_overlap(subject, other):
                raise errors.CONSUMER_OVERLAPPING_SUBJECT_FILTERS.error()


def consumer_config_from_record(record: dict[str, object]) -> ConsumerConfig:
    names = {f.name for f in dataclasses.fields(ConsumerConfig)}
    return ConsumerConfig(**{k: v for k, v in record.items() if k in names})  # type: ignore[arg-type]
