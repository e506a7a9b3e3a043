"""`/jsz`: JetStream totals, config and (with accounts/streams/consumers) per-account detail.

The detail comes from the JetStream layer through the view's optional `jetstream_details`
(the server layer cannot import JetStream); without JetStream the answer has nats-server's zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.durations import rfc3339_nano, wall_ns
from .endpoint import Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .jsinfo import config_json, meta_json, stats_json
from .params import BadRequest
from .view import JetStreamStats, ServerView


@dataclass(frozen=True, slots=True)
class JszOptions:
    """What /jsz (query `acc`, `accounts`, `streams`, `consumers`, `config`) and the system request
    `$SYS.REQ.SERVER.PING.JSZ` (nats-server's JSzOptions: `account`, `accounts`, `streams`,
    `consumer`, `config`) ask for."""

    account: str | None = None
    accounts: bool = False
    streams: bool = False
    consumers: bool = False
    config: bool = False
    raft: bool = False  # also count the streams and consumers this server leads
    leader_only: bool = False  # only the meta leader answers (others stay silent)


def query_options(ctx: RequestContext) -> JszOptions:
    query = ctx.query
    return JszOptions(account=query.get("acc"), accounts=query.boolean("accounts"),
                      streams=query.boolean("streams"), consumers=query.boolean("consumers"),
                      config=query.boolean("config"), leader_only=query.boolean("leader-only"),
                      raft=query.boolean("raft"))


def is_meta_leader(view: ServerView) -> bool:
    """Does this server lead the JetStream meta group (a standalone server always does)?
    False without JetStream."""
    js = view.jetstream()
    if js is None or not js.enabled:
        return False
    return js.meta is None or js.meta.leader == view.server_name


def jsz_json(view: ServerView, options: JszOptions) -> dict[str, JsonValue]:
    js = view.jetstream()
    out: dict[str, JsonValue] = {}
    stats = js.stats if js is not None and js.enabled else JetStreamStats()
    out.update(stats_json(stats))
    out["server_id"] = view.server_id
    out["now"] = rfc3339_nano(wall_ns(view.now_wall_s()))
    details_of = getattr(view, "jetstream_details", None)
    if js is None or not js.enabled or details_of is None:
        out.update(streams=0, consumers=0, messages=0, bytes=0, total=0)
        return out
    out["config"] = config_json(js)
    out["limits"] = dict(js.limits)
    totals, details = details_of(
        account=options.account,
        streams=options.streams,
        consumers=options.consumers,
        config=options.config,
        raft=options.raft,
    )
    out["streams"] = totals["streams"]
    if options.raft and totals.get("streams_leader"):  # omitempty
        out["streams_leader"] = totals["streams_leader"]
    out["consumers"] = totals["consumers"]
    if options.raft and totals.get("consumers_leader"):
        out["consumers_leader"] = totals["consumers_leader"]
    out.update(messages=totals["messages"], bytes=totals["bytes"])
    if js.meta is not None:
        out["meta_cluster"] = meta_json(js.meta)
    if js.under_replicated:  # beyond nats-server: streams waiting for a server to regain replicas
        out["under_replicated"] = [{"account": account, "stream": stream, "replicas": peers, "wanted": wanted}
                                   for account, stream, peers, wanted in js.under_replicated]
    if options.accounts or options.streams or options.consumers or options.account:
        out["account_details"] = details
    out["total"] = len(details)
    return out


def handle(ctx: RequestContext) -> Response:
    ctx.count()
    options = query_options(ctx)
    if options.leader_only and not is_meta_leader(ctx.view):
        raise BadRequest("filtered response: not leader")  # nats-server: 400 text/plain
    return json_response(jsz_json(ctx.view, options))


ENDPOINT = Endpoint(paths=("/jsz",), handle=handle, title="JetStream")
