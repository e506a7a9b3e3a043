"""`/healthz`: the status-code health probe, with nats-server's checks, texts and codes.

Order of checks (nats-server HandleHealthz): parameter sanity (400) → ready for connections (500) →
`js-server-only` stops → JetStream not configured stops (ok) → JetStream not running (503) →
`js-enabled-only` stops → meta layer (clustered, 503) → `js-meta-only` stops → requested
account/stream/consumer exist (404) → every stream and consumer held here is healthy (503).

Without `details` the first problem answers `{"status":"unavailable"|"error","error":"..."}`; with
`details=true` problems are collected as `errors:[{type,account?,stream?,consumer?,error}]` and
status is "error" or "ok". The body is compact JSON, not indented, as nats-server writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .endpoint import Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .view import JetStreamView, ServerView, StreamHealth

UNAVAILABLE = "unavailable"
JS_NOT_ENABLED = "JetStream not enabled (10076)"  # NewJSNotEnabledError().Error()
META_PROBLEMS = {
    "no_leader": "JetStream has not established contact with a meta leader",
    "recovering": "JetStream is still recovering meta layer",
    "not_current": "JetStream is not current with the meta leader",
    "not_running": "JetStream meta layer is not running",
    "write_error": "JetStream meta layer write error: {detail}",
    "apply_error": "JetStream meta layer apply error: {detail}",
}

STREAM_PROBLEMS = {
    "not_recovered": "JetStream stream {label} could not be recovered",
    "write_error": "JetStream stream {label} write error: {detail}",
    "not_current": "JetStream stream {label} is not current: {detail}",
    "damaged": "JetStream stream {label} has damaged data: {detail}",
    "under_replicated": "JetStream stream {label} is under-replicated: {detail}",
}


@dataclass(frozen=True, slots=True)
class HealthzOptions:
    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False


class Done(Exception):
    """Stop checking: the answer is decided."""


@dataclass(slots=True)
class Health:
    details: bool
    status: str = "ok"
    code: int = 0  # 0: decided at the end (503 with a problem, else 200)
    error: str = ""
    errors: list[dict[str, JsonValue]] = field(default_factory=list)

    def problem(
        self,
        kind: str,
        text: str,
        *,
        status: str = UNAVAILABLE,
        code: int = 0,
        final: bool = True,
        replace: bool = False,
        account: str = "",
        stream: str = "",
        consumer: str = "",
    ) -> None:
        """Record a problem; without details (or when `final`) stop checking."""
        if code:
            self.code = code
        if not self.details:
            self.status, self.error = status, text
            raise Done
        entry: dict[str, JsonValue] = {"type": kind}
        for key, name in (("account", account), ("stream", stream), ("consumer", consumer)):
            if name:
                entry[key] = name
        entry["error"] = text
        self.errors = [entry] if replace else self.errors + [entry]
        if final:
            raise Done

    def result(self) -> tuple[int, dict[str, JsonValue]]:
        """The HTTP status code and the body (nats-server leaves `status_code` out of HTTP bodies)."""
        if self.details:
            self.status = "error" if self.errors else "ok"
        code = self.code or (503 if self.error or self.errors else 200)
        body: dict[str, JsonValue] = {"status": self.status}
        if self.error:
            body["error"] = self.error
        if self.errors:
            body["errors"] = list[JsonValue](self.errors)
        return code, body


def decode(ctx: RequestContext) -> HealthzOptions:
    query = ctx.query
    js_enabled = query.boolean("js-enabled")  # deprecated spelling of js-enabled-only
    return HealthzOptions(
        js_enabled_only=query.boolean("js-enabled-only") or js_enabled,
        js_server_only=query.boolean("js-server-only"),
        js_meta_only=query.boolean("js-meta-only"),
        details=query.boolean("details"),
        account=query.get("account"),
        stream=query.get("stream"),
        consumer=query.get("consumer"),
    )


def check_request(health: Health, options: HealthzOptions) -> None:
    if not options.account and options.stream:
        text = '"account" must not be empty when checking stream health'
        health.problem("BAD_REQUEST", text, status="error", code=400)
    if not options.stream and options.consumer:
        text = '"stream" must not be empty when checking consumer health'
        health.problem("BAD_REQUEST", text, status="error", code=400)


def check_found(health: Health, js: JetStreamView, options: HealthzOptions) -> list[StreamHealth]:
    """The streams to check; 404 when a requested account, stream or consumer is not held here."""
    account, stream, consumer = options.account, options.stream, options.consumer
    if account and account not in js.accounts:
        text = f'JetStream account "{account}" not found'
        health.problem("ACCOUNT", text, code=404, replace=True, account=account)
    streams = [s for s in js.streams if not account or s.account == account]
    if stream:
        streams = [s for s in streams if s.name == stream]
        if not streams:
            text = f'JetStream stream "{stream}" not found on account "{account}"'
            health.problem("STREAM", text, code=404, replace=True, account=account, stream=stream)
    if consumer and not any(c.name == consumer for c in streams[0].consumers):
        text = f'JetStream consumer "{consumer}" not found for stream "{stream}" on account "{account}"'
        health.problem(
            "CONSUMER", text, code=404, replace=True, account=account, stream=stream, consumer=consumer
        )
    return streams


def check_assets(
    health: Health, streams: list[StreamHealth], options: HealthzOptions, *, clustered: bool
) -> None:
    for stream in streams:
        label = f"'{stream.account} > {stream.name}'"
        if stream.state != "ok":
            text = STREAM_PROBLEMS[stream.state].format(label=label, detail=stream.detail)
            health.problem("STREAM", text, final=False, account=stream.account, stream=stream.name)
            continue
        for consumer in stream.consumers:
            if consumer.state == "ok" or (options.consumer and consumer.name != options.consumer):
                continue
            if not clustered and consumer.state not in ("not_recovered", "damaged"):
                continue  # a single server only checks that its streams and consumers recovered
            label = f"'{stream.account} > {stream.name} > {consumer.name}'"
            text = f"JetStream consumer {label} is not current: "
            if consumer.state == "not_recovered":
                text = f"JetStream consumer {label} could not be recovered: "
            elif consumer.state == "damaged":
                text = f"JetStream consumer {label} recovered from a damaged log (redelivering): "
            health.problem(
                "CONSUMER", text + consumer.detail, final=False, account=stream.account, stream=stream.name,
                consumer=consumer.name,
            )  # fmt: skip


def check(view: ServerView, health: Health, options: HealthzOptions) -> None:
    check_request(health, options)
    ready_error = view.ready_error()
    if ready_error is not None:
        health.problem("CONNECTION", ready_error, status="error", code=500)
    js = view.jetstream()
    if options.js_server_only or js is None:
        return
    if not js.enabled:
        health.problem("JETSTREAM", JS_NOT_ENABLED)
    if options.js_enabled_only:
        return
    for line in js.damage:
        health.problem("JETSTREAM", f"JetStream meta log recovered from damage: {line}", final=False)
    if js.clustered and js.meta_state != "ok":
        health.problem("JETSTREAM", META_PROBLEMS[js.meta_state].format(detail=js.meta_detail), replace=True)
    if js.clustered and options.js_meta_only:
        return
    check_assets(health, check_found(health, js, options), options, clustered=js.clustered)


def healthz_json(view: ServerView, options: HealthzOptions) -> tuple[int, dict[str, JsonValue]]:
    health = Health(details=options.details)
    try:
        check(view, health, options)
    except Done:
        pass
    return health.result()


def handle(ctx: RequestContext) -> Response:
    ctx.count()  # nats-server counts /healthz before decoding its parameters
    code, body = healthz_json(ctx.view, decode(ctx))
    return json_response(body, status=code, indented=False)


ENDPOINT = Endpoint(paths=("/healthz",), handle=handle, title="Health Probe")
