"""The JetStream API as the bench speaks it: request bodies, response checks, PubAck parsing.

Pure functions over JSON, plus thin helpers that send one request on a Connection. Only the
standard `$JS.API.*` subjects are used, so every scenario works against any NATS server.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Literal, TypeVar

from appliance.bench.conn import Connection
from appliance.errors import ApplianceError, ProtocolError

Storage = Literal["file", "memory"]
AckPolicy = Literal["none", "all", "explicit"]
API_TIMEOUT_S = 10.0
ERR_STREAM_NOT_FOUND = 10059
ERR_NO_MESSAGE_FOUND = 10037
T = TypeVar("T")
ERR_UNAVAILABLE = 10008  # no meta leader (yet, or for the moment of an election)
ERR_NO_SUITABLE_PEERS = 10005  # a replicated stream's placement: too few servers known (yet)
UNAVAILABLE_WAIT_S = 30.0  # a create retried this long while a cluster's meta group elects
UNAVAILABLE_POLL_S = 0.25


class ApiError(ApplianceError):
    """The server answered a JetStream API request or publish with an error object."""

    def __init__(self, description: str, *, code: int, err_code: int) -> None:
        super().__init__(f"{description} ({code}/{err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


@dataclass(frozen=True, slots=True)
class PubAck:
    stream: str
    seq: int
    duplicate: bool = False


def _json_object(payload: bytes, what: str) -> dict[str, object]:
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"{what} is not JSON: {payload[:80]!r}", client_error="") from exc
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} is not a JSON object: {payload[:80]!r}", client_error="")
    return value


def _raise_error(value: dict[str, object]) -> None:
    error = value.get("error")
    if error is None:
        return
    if not isinstance(error, dict):
        raise ApiError(str(error), code=0, err_code=0)
    code, err_code = error.get("code", 0), error.get("err_code", 0)
    raise ApiError(str(error.get("description", "")),
                   code=code if isinstance(code, int) else 0,
                   err_code=err_code if isinstance(err_code, int) else 0)


def parse_pub_ack(payload: bytes) -> PubAck:
    """A PubAck: `{"stream":"S","seq":1}`, maybe `"duplicate": true`; raises ApiError on an error ack."""
    value = _json_object(payload, "PubAck")
    _raise_error(value)
    stream, seq = value.get("stream"), value.get("seq")
    if not isinstance(stream, str) or not isinstance(seq, int) or isinstance(seq, bool):
        raise ProtocolError(f"PubAck without stream/seq: {payload[:80]!r}", client_error="")
    return PubAck(stream, seq, value.get("duplicate") is True)


def check_response(payload: bytes) -> dict[str, object]:
    """An API response as a dict; raises ApiError when it carries an `error`."""
    value = _json_object(payload, "API response")
    _raise_error(value)
    return value


def stream_config(name: str, subjects: list[str], *, storage: Storage, replicas: int) -> dict[str, object]:
    return {"name": name, "subjects": subjects, "storage": storage, "num_replicas": replicas}


def kv_stream_config(bucket: str, *, storage: Storage, replicas: int) -> dict[str, object]:
    """A KV bucket's stream as nats.go creates it (ADR-8), history 1."""
    config = stream_config(f"KV_{bucket}", [f"$KV.{bucket}.>"], storage=storage, replicas=replicas)
    config.update({"max_msgs_per_subject": 1, "discard": "new", "deny_delete": True,
                   "allow_rollup_hdrs": True, "allow_direct": True})
    return config


def consumer_config(name: str, *, ack: AckPolicy, deliver_subject: str | None = None,
                    max_ack_pending: int | None = None) -> dict[str, object]:
    config: dict[str, object] = {"durable_name": name, "deliver_policy": "all", "ack_policy": ack}
    if deliver_subject is not None:
        config["deliver_subject"] = deliver_subject
    if max_ack_pending is not None and ack != "none":
        config["max_ack_pending"] = max_ack_pending
    return config


def pull_request(batch: int, *, expires_ns: int) -> bytes:
    return json.dumps({"batch": batch, "expires": expires_ns}, separators=(",", ":")).encode()


def call(conn: Connection, subject: str, body: dict[str, object] | None, *,
         timeout_s: float = API_TIMEOUT_S) -> dict[str, object]:
    """One API request; its response, or ApiError (503 no responders: nobody serves the API)."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    msg = conn.request(subject.encode(), payload, timeout_s)
    if msg.status == 503:
        raise ApiError("no responders: JetStream is not enabled on this server", code=503, err_code=0)
    return check_response(msg.payload)


def create_stream(conn: Connection, config: dict[str, object]) -> dict[str, object]:
    """Created; a replicated stream also waits out 10005 while a cluster that just formed has not
    yet heard from every peer (both nats-server and appliance place only on servers they know)."""
    replicas = config.get("num_replicas", 1)
    forming = (ERR_NO_SUITABLE_PEERS,) if isinstance(replicas, int) and replicas > 1 else ()
    return until_available(lambda: call(conn, f"$JS.API.STREAM.CREATE.{config['name']}", config), also=forming)


def until_available(request: Callable[[], T], *, timeout_s: float = UNAVAILABLE_WAIT_S,
                    also: tuple[int, ...] = ()) -> T:
    """An idempotent request (a create with the same config), asked again while the cluster
    answers 503/10008 (its meta group is electing: after a start, or a leader starved on a loaded
    machine), an error code of `also`, or does not answer at all, for a bounded time; any other
    error is raised at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return request()
        except (ApiError, TimeoutError) as exc:
            unavailable = not isinstance(exc, ApiError) or exc.err_code in (ERR_UNAVAILABLE, *also)
            if not unavailable or time.monotonic() >= deadline:
                raise
        time.sleep(UNAVAILABLE_POLL_S)


def delete_stream(conn: Connection, name: str) -> bool:
    """Delete if present; False when there was no such stream. Asked again while the cluster has
    no meta leader, as a create."""
    try:
        until_available(lambda: call(conn, f"$JS.API.STREAM.DELETE.{name}", None))
    except ApiError as exc:
        if exc.err_code == ERR_STREAM_NOT_FOUND:
            return False
        raise
    return True


def stream_info(conn: Connection, name: str) -> dict[str, object]:
    return until_available(lambda: call(conn, f"$JS.API.STREAM.INFO.{name}", None))


def create_consumer(conn: Connection, stream: str, config: dict[str, object]) -> dict[str, object]:
    name = config["durable_name"]
    return until_available(
        lambda: call(conn, f"$JS.API.CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config}))
