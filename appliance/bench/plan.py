"""From a bench request (verb + flags) to a plan: the clients to start and the server-side setup.

Setup (streams, prefill, consumers) runs in the orchestrating process before any client starts
and is not measured; teardown removes what setup created unless asked to keep it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from appliance.bench import jsapi, replicas
from appliance.bench.conn import Connection
from appliance.bench.js import js_pub_async
from appliance.bench.spec import Ack, ClientSpec, Role
from appliance.limits import (
    BENCH_ASYNC_WINDOW_MAX,
    BENCH_CLIENTS_MAX,
    BENCH_FETCH_BATCH_MAX,
    BENCH_IDLE_TIMEOUT_S,
    PAYLOAD_BYTES_MAX,
)

Verb = Literal["pub", "sub", "pubsub", "request", "reply", "js-pub", "js-fetch", "js-push", "kv-put", "kv-get"]
VERBS: tuple[Verb, ...] = ("pub", "sub", "pubsub", "request", "reply", "js-pub", "js-fetch", "js-push",
                           "kv-put", "kv-get")
PREFILL_WINDOW = 256
REPLICAS_MAX = 5  # nats-server: `maximum replicas is 5`
JS_VERBS = frozenset({"js-pub", "js-fetch", "js-push", "kv-put", "kv-get"})


@dataclass(frozen=True, slots=True)
class BenchRequest:
    verb: Verb
    url: str = "nats://127.0.0.1:4222"
    # subscribers and responders connect here when set (another node of a cluster: publisher on n1,
    # subscriber on n2); publishers then wait until the subscribers' interest has reached their node
    sub_url: str = ""
    subject: str = "bench"
    msgs: int = 100_000
    size: int = 128
    pubs: int = 1
    subs: int = 1
    clients: int = 1  # js/kv/request clients
    repliers: int = 1  # request: responders started with it (0 = someone else answers)
    stream: str = "benchstream"
    consumer: str = "benchconsumer"
    replicas: int = 1
    storage: jsapi.Storage = "file"
    window: int = 256  # js-pub: outstanding acks; 0 = synchronous
    batch: int = 500  # js-fetch: pull batch
    ack: Ack = "explicit"
    bucket: str = "benchkv"
    keys: int = 1000
    keep: bool = False  # leave streams in place after the run
    # the caller created the stream (an R3 stream whose leader it looked up to place the client):
    # setup uses it as it is (still waits until it is healthy) instead of deleting and creating it
    stream_ready: bool = False
    timeout_s: float = BENCH_IDLE_TIMEOUT_S  # a client without progress for this long gives up


@dataclass(frozen=True, slots=True)
class Plan:
    request: BenchRequest
    clients: tuple[ClientSpec, ...]
    setup: Callable[[Connection], None]
    teardown: Callable[[Connection], None]


def split(total: int, parts: int) -> list[int]:
    """Share `total` operations among `parts` clients as evenly as possible."""
    assert parts > 0
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _specs(req: BenchRequest, role: Role, count: int, *, each: int | None = None, **extra: object) -> list[ClientSpec]:
    base = ClientSpec(url=req.url, role=role, index=0, msgs=0, size=req.size, subject=req.subject,
                      stream=req.stream, consumer=req.consumer, window=req.window, batch=req.batch,
                      ack=req.ack, bucket=req.bucket, keys=req.keys, timeout_s=req.timeout_s)
    shares = [each] * count if each is not None else split(req.msgs, count)
    return [replace(base, index=i, msgs=shares[i], **extra) for i in range(count)]  # type: ignore[arg-type]


PROBE_PREFIX = "_BENCH_PROBE"


def make_plan(req: BenchRequest) -> Plan:
    """Validate the request and decide which clients run and what is set up first."""
    _validate(req)
    clients = _clients(req)
    if req.sub_url:
        clients = _across_nodes(req, clients)
    if not 0 < len(clients) <= BENCH_CLIENTS_MAX:
        raise ValueError(f"between 1 and {BENCH_CLIENTS_MAX} clients, not {len(clients)}")
    return Plan(req, tuple(clients), lambda conn: _setup(conn, req), lambda conn: _teardown(conn, req))


def _across_nodes(req: BenchRequest, clients: list[ClientSpec]) -> list[ClientSpec]:
    """Receivers (sub, reply) on `sub_url`; every sender waits in its set-up until each receiver has
    answered a probe sent on the sender's own connection (the receivers subscribe their subject
    before the probe, so their interest has crossed the route to the sender's node and worker;
    appliance.bench.probe)."""
    receivers = sum(1 for c in clients if c.role in ("sub", "reply"))
    senders = len(clients) - receivers
    if not receivers or not senders:
        return [replace(c, url=req.sub_url) if c.role in ("sub", "reply") else c for c in clients]
    probe = f"{PROBE_PREFIX}.{req.subject}"
    return [replace(c, url=req.sub_url, probe=probe, probe_answers=senders) if c.role in ("sub", "reply")
            else replace(c, probe=probe, probe_answers=receivers) for c in clients]


def _validate(req: BenchRequest) -> None:
    problems = []
    if req.msgs <= 0:
        problems.append("--msgs must be > 0")
    if not 0 <= req.size <= PAYLOAD_BYTES_MAX:
        problems.append(f"--size must be within 0..{PAYLOAD_BYTES_MAX}")
    if min(req.pubs, req.subs, req.clients, req.keys) < 1 or req.repliers < 0:
        problems.append("--pub, --sub, --clients and --keys must be >= 1, --repliers >= 0")
    if not 0 <= req.window <= BENCH_ASYNC_WINDOW_MAX:
        problems.append(f"--window must be within 0..{BENCH_ASYNC_WINDOW_MAX}")
    if not 1 <= req.batch <= BENCH_FETCH_BATCH_MAX:
        problems.append(f"--batch must be within 1..{BENCH_FETCH_BATCH_MAX}")
    if req.timeout_s <= 0:
        problems.append("--timeout must be > 0")
    if not 1 <= req.replicas <= REPLICAS_MAX:
        problems.append(f"--replicas must be within 1..{REPLICAS_MAX}")
    if problems:
        raise ValueError("; ".join(problems))


def _clients(req: BenchRequest) -> list[ClientSpec]:
    v = req.verb
    if v == "pub":
        return _specs(req, "pub", req.pubs)
    if v == "sub":
        return _specs(req, "sub", req.subs, each=req.msgs)
    if v == "pubsub":
        return _specs(req, "pub", req.pubs) + _specs(req, "sub", req.subs, each=req.msgs)
    if v == "request":
        return _specs(req, "request", req.clients) + _specs(req, "reply", req.repliers, each=0)
    if v == "reply":
        return _specs(req, "reply", req.clients, each=req.msgs)
    if v == "js-pub":
        return _specs(req, "js-pub", req.clients)
    if v == "js-fetch":
        return _specs(req, "js-fetch", req.clients)
    if v == "js-push":
        return [replace(s, consumer=f"{req.consumer}{s.index}")
                for s in _specs(req, "js-push", req.clients, each=req.msgs)]
    if v == "kv-put":
        return _specs(req, "kv-put", req.clients)
    if v == "kv-get":
        return _specs(req, "kv-get", req.clients)
    raise ValueError(f"unknown verb {v!r}")


def stream_name(req: BenchRequest) -> str:
    return f"KV_{req.bucket}" if req.verb.startswith("kv-") else req.stream


def _setup(conn: Connection, req: BenchRequest) -> None:
    if req.verb not in JS_VERBS:
        return
    if not req.stream_ready:
        jsapi.delete_stream(conn, stream_name(req))
        jsapi.create_stream(conn, stream_config_of(req))
    if req.replicas > 1:  # an election and the replicas' catch-up are not part of the measurement
        replicas.wait_healthy(conn, stream_name(req), req.replicas)
    if req.verb in ("js-fetch", "js-push"):
        prefill(conn, req.subject, req.msgs, req.size)
    if req.verb == "kv-get":
        for key in range(req.keys):
            prefill(conn, f"$KV.{req.bucket}.k{key}", 1, req.size)
    if req.verb == "js-fetch":
        config = jsapi.consumer_config(req.consumer, ack=req.ack,
                                       max_ack_pending=max(1000, 2 * req.batch * req.clients))
        jsapi.create_consumer(conn, req.stream, config)
        if req.replicas > 1:
            replicas.wait_healthy(conn, req.stream, req.replicas, consumer=req.consumer)


def stream_config_of(req: BenchRequest) -> dict[str, object]:
    """The stream a JetStream request runs on (a KV bucket's for kv-*)."""
    if req.verb.startswith("kv-"):
        return jsapi.kv_stream_config(req.bucket, storage=req.storage, replicas=req.replicas)
    return jsapi.stream_config(req.stream, [req.subject], storage=req.storage, replicas=req.replicas)


def prefill(conn: Connection, subject: str, msgs: int, size: int) -> None:
    """Store `msgs` messages before the measured part; raises if any publish failed."""
    spec = ClientSpec(url="", role="js-pub", index=0, msgs=msgs, size=size, subject=subject,
                      window=min(PREFILL_WINDOW, msgs))
    result = js_pub_async(conn, spec, lambda _done: None)
    if result.errors:
        raise jsapi.ApiError(f"prefill failed: {result.first_error}", code=0, err_code=0)


def _teardown(conn: Connection, req: BenchRequest) -> None:
    if req.verb in JS_VERBS and not req.keep:
        jsapi.delete_stream(conn, stream_name(req))
