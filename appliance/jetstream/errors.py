"""nats-server's JetStream API errors (server/errors.json), kept as data.

Each entry is (code, err_code, description); a description may hold `{name}` templates filled
by `ApiError.format`. The numbers are identical to nats-server's because clients map them to
typed errors (10059 -> stream not found, 10071 -> wrong last sequence, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.errors import ApplianceError


@dataclass(frozen=True, slots=True)
class ApiError:
    code: int
    err_code: int
    description: str

    def format(self, **values: object) -> JsApiError:
        return JsApiError(self, self.description.format(**values) if values else self.description)

    def error(self) -> JsApiError:
        return JsApiError(self, self.description)


class JsApiError(ApplianceError):
    """A request that nats-server would answer with this error."""

    def __init__(self, entry: ApiError, description: str) -> None:
        super().__init__(description)
        self.entry = entry
        self.description = description

    def as_json(self) -> dict[str, object]:
        return {"code": self.entry.code, "err_code": self.entry.err_code, "description": self.description}


BAD_REQUEST = ApiError(400, 10003, "bad request")
CLUSTER_NO_PEERS = ApiError(400, 10005, "{err}")  # no suitable peers for placement[, tags not matched [...]]
CLUSTER_REQUIRED = ApiError(503, 10010, "JetStream clustering support required")
CLUSTER_PEER_NOT_MEMBER = ApiError(400, 10040, "peer not a member")
CLUSTER_SERVER_NOT_MEMBER = ApiError(400, 10044, "server is not a member of the cluster")
PEER_REMAP_FAILED = ApiError(503, 10075, "peer remap failed")
CLUSTER_NOT_AVAILABLE = ApiError(503, 10008, "JetStream system temporarily unavailable")
RAFT_GENERAL = ApiError(500, 10041, "{err}")
CONSUMER_CREATE = ApiError(500, 10012, "{err}")
CONSUMER_NAME_EXISTS = ApiError(400, 10013, "consumer name already in use")
CONSUMER_NOT_FOUND = ApiError(404, 10014, "consumer not found")
CONSUMER_INVALID_RESET = ApiError(400, 10204, "invalid reset: {err}")
CONSUMER_PULL_WITH_RATE_LIMIT = ApiError(400, 10086, "consumer in pull mode can not have rate limit set")
CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT = ApiError(
    400, 10016, "consumer expected to be durable but no durable name set in subject"
)
CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT = ApiError(
    400, 10017, "consumer name in subject does not match durable name in request"
)
CONSUMER_DURABLE_NAME_NOT_SET = ApiError(
    400, 10018, "consumer expected to be durable but a durable name was not set"
)
CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT = ApiError(
    400, 10019, "consumer expected to be ephemeral but detected a durable name set in subject"
)
CONSUMER_EPHEMERAL_WITH_DURABLE = ApiError(
    400, 10020, "consumer expected to be ephemeral but a durable name was set in request"
)
INVALID_JSON = ApiError(400, 10025, "invalid JSON: {err}")
MAXIMUM_CONSUMERS_LIMIT = ApiError(400, 10026, "maximum consumers limit reached")
NO_MESSAGE_FOUND = ApiError(404, 10037, "no message found")
NOT_EMPTY_REQUEST = ApiError(400, 10038, "expected an empty request payload")
NOT_ENABLED_FOR_ACCOUNT = ApiError(503, 10039, "JetStream not enabled for account")
SEQUENCE_NOT_FOUND = ApiError(400, 10043, "sequence {seq} not found")
STREAM_CREATE = ApiError(500, 10049, "{err}")
STREAM_DELETE = ApiError(500, 10050, "{err}")
STREAM_GENERAL = ApiError(500, 10051, "{err}")
STREAM_INVALID_CONFIG = ApiError(500, 10052, "{err}")
STREAM_LIMITS = ApiError(500, 10053, "{err}")
STREAM_MESSAGE_EXCEEDS_MAXIMUM = ApiError(400, 10054, "message size exceeds maximum allowed")
STREAM_MISMATCH = ApiError(400, 10056, "stream name in subject does not match request")
STREAM_MSG_DELETE_FAILED = ApiError(500, 10057, "{err}")
STREAM_NAME_EXISTS = ApiError(400, 10058, "stream name already in use with a different configuration")
STREAM_NOT_FOUND = ApiError(404, 10059, "stream not found")
STREAM_NOT_MATCH = ApiError(400, 10060, "expected stream does not match")
STREAM_SEQUENCE_NOT_MATCH = ApiError(503, 10063, "expected stream sequence does not match")
STREAM_SUBJECT_OVERLAP = ApiError(400, 10065, "subjects overlap with an existing stream")
STREAM_UPDATE = ApiError(500, 10069, "{err}")
STREAM_WRONG_LAST_MSG_ID = ApiError(400, 10070, "wrong last msg ID: {id}")
STREAM_WRONG_LAST_SEQUENCE = ApiError(400, 10071, "wrong last sequence: {seq}")
REPLICAS_NOT_SUPPORTED = ApiError(500, 10074, "replicas > 1 not supported in non-clustered mode")
NOT_ENABLED = ApiError(503, 10076, "JetStream not enabled")
STREAM_STORE_FAILED = ApiError(503, 10077, "{err}")
CONSUMER_CONFIG_REQUIRED = ApiError(400, 10078, "consumer config required")
CONSUMER_DELIVER_TO_WILDCARDS = ApiError(400, 10079, "consumer deliver subject has wildcards")
CONSUMER_PUSH_MAX_WAITING = ApiError(400, 10080, "consumer in push mode can not set max waiting")
CONSUMER_DELIVER_CYCLE = ApiError(400, 10081, "consumer deliver subject forms a cycle")
CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED = ApiError(
    400, 10082, "consumer requires ack policy for max ack pending"
)
CONSUMER_SMALL_HEARTBEAT = ApiError(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
CONSUMER_PULL_REQUIRES_ACK = ApiError(
    400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"
)
CONSUMER_PULL_NOT_DURABLE = ApiError(400, 10085, "consumer in pull mode requires a durable name")
CONSUMER_HB_REQUIRES_PUSH = ApiError(400, 10088, "consumer idle heartbeat requires a push based consumer")
CONSUMER_FC_REQUIRES_PUSH = ApiError(400, 10089, "consumer flow control requires a push based consumer")
CONSUMER_DIRECT_REQUIRES_PUSH = ApiError(400, 10090, "consumer direct requires a push based consumer")
CONSUMER_INVALID_POLICY = ApiError(400, 10094, "{err}")
CONSUMER_INVALID_SAMPLING = ApiError(400, 10095, "failed to parse consumer sampling configuration: {err}")
STREAM_INVALID = ApiError(500, 10096, "stream not valid")
STREAM_HEADER_EXCEEDS_MAXIMUM = ApiError(400, 10097, "header size exceeds maximum allowed of 64k")
CONSUMER_WQ_REQUIRES_EXPLICIT_ACK = ApiError(400, 10098, "workqueue stream requires explicit ack")
CONSUMER_WQ_MULTIPLE_UNFILTERED = ApiError(
    400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"
)
CONSUMER_WQ_CONSUMER_NOT_UNIQUE = ApiError(400, 10100, "filtered consumer not unique on workqueue stream")
CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL = ApiError(
    400, 10101, "consumer must be deliver all on workqueue stream"
)
CONSUMER_NAME_TOO_LONG = ApiError(400, 10102, "consumer name is too long, maximum allowed is {max}")
CONSUMER_BAD_DURABLE_NAME = ApiError(400, 10103, "durable name can not contain '.', '*', '>'")
CONSUMER_STORE_FAILED = ApiError(500, 10104, "{err}")
CONSUMER_EXISTING_ACTIVE = ApiError(400, 10105, "consumer already exists and is still active")
CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME = ApiError(
    400, 10106, "consumer replacement durable config not the same"
)
CONSUMER_DESCRIPTION_TOO_LONG = ApiError(
    400, 10107, "consumer description is too long, maximum allowed is {max}"
)
CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS = ApiError(
    400, 10108, "consumer with flow control also needs heartbeats"
)
STREAM_SEALED = ApiError(400, 10109, "invalid operation on sealed stream")
# A replicated stream's leader decides publishes before they commit (decide.py)
STREAM_DUPLICATE_MESSAGE_CONFLICT = ApiError(409, 10158, "duplicate message id is in process")
STREAM_WRONG_LAST_SEQUENCE_CONSTANT = ApiError(400, 10164, "wrong last sequence")
STREAM_PURGE_FAILED = ApiError(500, 10110, "{err}")
STREAM_ROLLUP_FAILED = ApiError(500, 10111, "{err}")
CONSUMER_INVALID_DELIVER_SUBJECT = ApiError(400, 10112, "invalid push consumer deliver subject")
CONSUMER_MAX_REQUEST_BATCH_NEGATIVE = ApiError(400, 10114, "consumer max request batch needs to be > 0")
CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL = ApiError(
    400, 10115, "consumer max request expires needs to be >= 1ms"
)
CONSUMER_MAX_DELIVER_BACKOFF = ApiError(
    400, 10116, "max deliver is required to be > length of backoff values"
)
STREAM_INFO_MAX_SUBJECTS = ApiError(500, 10117, "subject details would exceed maximum allowed")
CONSUMER_MAX_REQUEST_BATCH_EXCEEDED = ApiError(
    400, 10125, "consumer max request batch exceeds server limit of {limit}"
)
CONSUMER_NAME_CONTAINS_PATH_SEPARATORS = ApiError(400, 10127, "Consumer name can not contain path separators")
STREAM_NAME_CONTAINS_PATH_SEPARATORS = ApiError(400, 10128, "Stream name can not contain path separators")
CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH = ApiError(
    400, 10131, "Consumer create request did not match filtered subject from create subject"
)
CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH = ApiError(
    400, 10132, "Consumer Durable and Name have to be equal if both are provided"
)
REPLICAS_COUNT_CANNOT_BE_NEGATIVE = ApiError(400, 10133, "replicas count cannot be negative")
CONSUMER_DUPLICATE_FILTER_SUBJECTS = ApiError(
    400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"
)
CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED = ApiError(
    400, 10137, "consumer with multiple subject filters cannot use subject based API"
)
CONSUMER_OVERLAPPING_SUBJECT_FILTERS = ApiError(400, 10138, "consumer subject filters cannot overlap")
CONSUMER_EMPTY_FILTER = ApiError(400, 10139, "consumer filter in FilterSubjects cannot be empty")
CONSUMER_ACK_WAIT_NEGATIVE = ApiError(400, 10183, "consumer ack wait needs to be positive")
CONSUMER_BACKOFF_NEGATIVE = ApiError(400, 10184, "consumer backoff needs to be positive")
CONSUMER_ALREADY_EXISTS = ApiError(400, 10148, "consumer already exists")
CONSUMER_DOES_NOT_EXIST = ApiError(400, 10149, "consumer does not exist")
CONSUMER_INACTIVE_THRESHOLD_EXCESS = ApiError(
    400, 10153, "consumer inactive threshold exceeds system limit of {limit}"
)
MESSAGE_TTL_INVALID = ApiError(400, 10165, "invalid per-message TTL")
# Account and server resource limits (resources.py)
ACCOUNT_RESOURCES_EXCEEDED = ApiError(400, 10002, "resource limits exceeded for account")
INSUFFICIENT_RESOURCES = ApiError(503, 10023, "insufficient resources")
MAXIMUM_STREAMS_LIMIT = ApiError(400, 10027, "maximum number of streams reached")
NO_LIMITS = ApiError(400, 10120, "no JetStream default or applicable tiered limit present")
MEMORY_RESOURCES_EXCEEDED = ApiError(500, 10028, "insufficient memory resources available")
STORAGE_RESOURCES_EXCEEDED = ApiError(500, 10047, "insufficient storage resources available")
STREAM_MAX_BYTES_REQUIRED = ApiError(400, 10113, "account requires a stream config to have max bytes set")
CONSUMER_MAX_PENDING_ACK_EXCESS = ApiError(
    400, 10121, "consumer max ack pending exceeds system limit of {limit}"
)
STREAM_MAX_STREAM_BYTES_EXCEEDED = ApiError(
    400, 10122, "stream max bytes exceeds account limit max stream bytes"
)
# Stream sources (sources.py)
SOURCE_DUPLICATE_DETECTED = ApiError(400, 10140, "duplicate source configuration detected")
SOURCED_STREAM_NAME_INVALID = ApiError(400, 10141, "sourced stream name is invalid")
MIRROR_WITH_SOURCES = ApiError(400, 10031, "stream mirrors can not also contain other sources")
MIRROR_WITH_SUBJECTS = ApiError(400, 10034, "stream mirrors can not contain subjects")
MIRROR_CONFIG_CHANGE = ApiError(400, 10055, "stream mirror configuration can not be updated")
MIRRORED_STREAM_NAME_INVALID = ApiError(400, 10142, "mirrored stream name is invalid")
MIRROR_WITH_FIRST_SEQ = ApiError(400, 10143, "stream mirrors can not have first sequence configured")
SOURCE_TRANSFORMS_WITH_FILTER = ApiError(
    400, 10144, "source with multiple subject transforms cannot also have a single subject filter"
)
SOURCE_INVALID_SUBJECT_FILTER = ApiError(400, 10145, "source transform source: {err}")
SOURCE_INVALID_TRANSFORM_DESTINATION = ApiError(400, 10146, "source transform: {err}")
SOURCE_OVERLAPPING_SUBJECT_FILTERS = ApiError(400, 10147, "source filters can not overlap")
MIRROR_TRANSFORMS_WITH_FILTER = ApiError(
    400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter"
)
MIRROR_INVALID_SUBJECT_FILTER = ApiError(400, 10151, "mirror transform source: {err}")
MIRROR_OVERLAPPING_SUBJECT_FILTERS = ApiError(400, 10152, "mirror subject filters can not overlap")
MIRROR_INVALID_TRANSFORM_DESTINATION = ApiError(400, 10154, "mirror transform: {err}")
STREAM_TRANSFORM_INVALID_SOURCE = ApiError(400, 10155, "stream transform source: {err}")
STREAM_TRANSFORM_INVALID_DESTINATION = ApiError(400, 10156, "stream transform: {err}")
MIRROR_MAX_MESSAGE_SIZE_TOO_BIG = ApiError(400, 10030, "stream mirror must have max message size >= source")
SOURCE_MAX_MESSAGE_SIZE_TOO_BIG = ApiError(400, 10046, "stream source must have max message size >= target")
PEDANTIC = ApiError(400, 10157, "pedantic mode: {err}")
MESSAGE_TTL_DISABLED = ApiError(400, 10166, "per-message TTL is disabled")
# Pull consumer priority groups
CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP = ApiError(
    400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"
)
CONSUMER_INVALID_PRIORITY_GROUP = ApiError(
    400, 10160, "Provided priority group does not exist for this consumer"
)
CONSUMER_EMPTY_GROUP_NAME = ApiError(400, 10161, "Group name cannot be an empty string")
CONSUMER_INVALID_GROUP_NAME = ApiError(
    400, 10162,
    "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
)
CONSUMER_PUSH_WITH_PRIORITY_GROUP = ApiError(
    400, 10178, "priority groups can not be used with push consumers"
)
CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE = ApiError(
    400, 10196, "consumer can not have priority groups when policy is none"
)
CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY = ApiError(
    400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none"
)
REQUIRED_API_LEVEL = ApiError(412, 10185, "JetStream minimum api level required")
# Stream snapshot and restore (backup.py, restore.py)
SNAPSHOT_DELIVER_SUBJECT_INVALID = ApiError(400, 10015, "deliver subject not valid")
STREAM_RESTORE = ApiError(500, 10062, "restore failed: {err}")
STREAM_SNAPSHOT = ApiError(500, 10064, "snapshot failed: {err}")
STREAM_NAME_EXIST_RESTORE_FAILED = ApiError(400, 10130, "stream name already in use, cannot restore")

# Texts nats-server puts in {err} of the generic entries above.
CONFIG_STORAGE_CHANGE = "stream configuration update can not change storage type"
MSG_DELETE_NOT_PERMITTED = "message delete not permitted"
PURGE_NOT_PERMITTED = "stream purge not permitted"
