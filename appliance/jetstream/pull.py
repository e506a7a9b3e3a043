"""Pull requests (ADR-13): parsing `$JS.API.CONSUMER.MSG.NEXT` bodies and the 4xx status texts."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.decode import BOOL, DURATION, INT, INT64, STRING, GoJsonError, GoStruct, unmarshal
from appliance.jetstream.host import Timer
from appliance.durations import go_duration


PRIORITY_LAST = 2**31 - 1  # a request without a priority group comes after every priority


@dataclass(slots=True, eq=False)  # requests are compared by identity: two alike are two requests
class PullRequest:
    reply: str
    batch: int
    max_bytes: int = 0
    expires_at_ns: int = 0  # 0: never
    no_wait: bool = False
    heartbeat_ns: int = 0
    group: str = ""  # priority group (priority_groups consumers)
    min_pending: int = 0  # overflow: served only once num_pending reaches this ...
    min_ack_pending: int = 0  # ... or num_ack_pending this
    priority: int = PRIORITY_LAST  # prioritized: 0 is served first
    received_ns: int = 0
    delivered: int = 0
    bytes_sent: int = 0
    timer: Timer | None = None
    heartbeat_timer: Timer | None = None

    @property
    def remaining(self) -> int:
        return self.batch - self.delivered

    @property
    def bytes_left(self) -> int:
        return self.max_bytes - self.bytes_sent if self.max_bytes else 0

    def cancel_timers(self) -> None:
        for timer in (self.timer, self.heartbeat_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.heartbeat_timer = None


class BadPull(Exception):
    """A pull request nats-server answers with a status (code, description) and no messages."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


# nats-server's JSApiConsumerGetNextRequest (with its PriorityGroup), decoded by json.Unmarshal into
# a pooled value: unknown fields are ignored and errors name the struct "" (".batch").
PULL_REQUEST_TYPE = GoStruct(
    "server.JSApiConsumerGetNextRequest",
    {
        "expires": DURATION,
        "batch": INT,
        "max_bytes": INT,
        "no_wait": BOOL,
        "idle_heartbeat": DURATION,
        "group": STRING,
        "min_pending": INT64,
        "min_ack_pending": INT64,
        "id": STRING,
        "priority": INT,
    },
    strict=False,
)


def parse_pull(body: bytes, reply: str, config: ConsumerConfig, now_ns: int) -> PullRequest:
    text = body.strip()
    batch, expires, no_wait, max_bytes, heartbeat = 1, 0, False, 0, 0
    group: dict[str, object] | None = None  # nats-server's priorityGroup: only a JSON request has one
    if text.startswith(b"{"):
        try:
            obj = unmarshal(text, PULL_REQUEST_TYPE, "")
        except GoJsonError as exc:
            raise BadPull(400, f"Bad Request - {exc}") from None
        batch = int(obj.get("batch") or 0)
        expires = int(obj.get("expires") or 0)
        no_wait = bool(obj.get("no_wait"))
        max_bytes = max(int(str(obj.get("max_bytes") or 0)), 0)  # none or negative: no limit
        heartbeat = max(int(str(obj.get("idle_heartbeat") or 0)), 0)
        group = obj
        if batch <= 0:
            batch = 1
    elif text:
        try:
            batch = max(int(text), 1)
        except ValueError:
            batch = 1
    if config.max_batch and batch > config.max_batch:
        raise BadPull(409, f"Exceeded MaxRequestBatch of {config.max_batch}")
    if config.max_expires and expires > config.max_expires:
        raise BadPull(409, f"Exceeded MaxRequestExpires of {go_duration(config.max_expires)}")
    if config.max_bytes and max_bytes > config.max_bytes:
        raise BadPull(409, f"Exceeded MaxRequestMaxBytes of {config.max_bytes}")
    if heartbeat and heartbeat * 2 > expires:
        raise BadPull(400, "Bad Request - heartbeat value too large")
    request = PullRequest(
        reply=reply,
        batch=batch,
        max_bytes=max_bytes,
        expires_at_ns=now_ns + expires if expires else 0,
        no_wait=no_wait,
        heartbeat_ns=heartbeat,
        received_ns=now_ns,
    )
    if group is not None:
        _priority(request, group, config)
    return request


def _priority(request: PullRequest, obj: dict[str, object], config: ConsumerConfig) -> None:
    """A JSON pull request's priority group fields, checked as nats-server checks them."""
    request.min_pending = int(str(obj.get("min_pending") or 0))
    request.min_ack_pending = int(str(obj.get("min_ack_pending") or 0))
    priority = int(str(obj.get("priority") or 0))
    policy = config.priority_policy
    if (request.min_pending or request.min_ack_pending) and policy != "overflow":
        raise BadPull(400, "Bad Request - Not a Overflow Priority consumer")
    if obj.get("id") and policy != "pinned_client":
        raise BadPull(400, "Bad Request - Not a Pinned Client Priority consumer")
    if not 0 <= priority <= 9:
        raise BadPull(400, "Bad Request - Priority must be between 0 and 9")
    request.priority = priority
    if not policy:
        return
    request.group = str(obj.get("group") or "")
    if not request.group:
        raise BadPull(400, "Bad Request - Priority Group missing")
    if request.group not in config.priority_groups:
        raise BadPull(400, "Bad Request - Invalid Priority Group")
