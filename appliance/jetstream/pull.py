"""Pull requests (ADR-13): parsing `$JS.API.CONSUMER.MSG.NEXT` bodies and the 4xx status texts."""

from __future__ import annotations

import json
from dataclasses import dataclass

from appliance.jetstream.config import ConsumerConfig
from appliance.jetstream.decode import parse_json
from appliance.jetstream.errors import JsApiError
from appliance.jetstream.host import Timer
from appliance.jetstream.wire import go_duration


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


# JSApiConsumerGetNextRequest's fields and their Go types (a wrong JSON type is a 400 naming them)
GO_FIELDS: dict[str, str] = {
    "batch": "int",
    "expires": "time.Duration",
    "no_wait": "bool",
    "max_bytes": "int",
    "idle_heartbeat": "time.Duration",
    "group": "string",
    "min_pending": "int64",
    "min_ack_pending": "int64",
    "id": "string",
    "priority": "int",
}
_JSON_KINDS = {str: "string", bool: "bool", list: "array", dict: "object"}


class _Fraction(str):
    """A JSON number with a fraction or exponent, kept as written (Go quotes it so)."""


def _decode(text: bytes) -> dict[str, object]:
    """A JSON pull request as Go's json.Unmarshal reads it: unknown fields ignored, a wrong
    type, a fraction or an out-of-range integer refused (BadPull 400 with Go's words)."""
    try:
        parse_json(text)  # Go's syntax error texts
    except JsApiError as exc:
        # Go's own text, without the offset nats-server's API decoder adds elsewhere
        message = exc.description.removeprefix("invalid JSON: ").split(" at offset ")[0]
        raise BadPull(400, f"Bad Request - {message}") from None
    obj = json.loads(text, parse_float=_Fraction)
    if not isinstance(obj, dict):
        raise BadPull(400, "Bad Request")
    checked: dict[str, object] = {}
    for key, go_type in GO_FIELDS.items():
        value = obj.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, _Fraction)) and not isinstance(value, bool)
        if go_type == "string":
            ok = type(value) is str
        elif go_type == "bool":
            ok = isinstance(value, bool)
        else:  # Go's int and int64 here are 64 bits
            whole = number and not isinstance(value, _Fraction)
            ok = whole and -(2**63) <= value < 2**63
        if not ok:
            if number and go_type not in ("string", "bool"):
                kind = f"number {value}"
            elif number:
                kind = "number"
            else:
                kind = _JSON_KINDS.get(type(value), "number")
            reason = f"json: cannot unmarshal {kind} into Go struct field .{key} of type {go_type}"
            raise BadPull(400, f"Bad Request - {reason}")
        checked[key] = value
    return checked


def parse_pull(body: bytes, reply: str, config: ConsumerConfig, now_ns: int) -> PullRequest:
    text = body.strip()
    batch, expires, no_wait, max_bytes, heartbeat = 1, 0, False, 0, 0
    group: dict[str, object] | None = None  # nats-server's priorityGroup: only a JSON request has one
    if text.startswith(b"{"):
        obj = _decode(text)
        batch = int(str(obj.get("batch") or 0))
        expires = int(str(obj.get("expires") or 0))
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
