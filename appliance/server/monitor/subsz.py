"""`/subsz` (also `/subscriptionsz`): sublist statistics summed over accounts, optionally the subscriptions.

Parameters: subs (list them), offset, limit (default 1024), acc (one account), test (a literal subject:
list only subscriptions a message on it would match). Sums follow nats-server's SublistStats.add:
counts add up, max_fanout is the maximum, cache_hit_rate and avg_fanout are recomputed from the sums.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from appliance.durations import rfc3339_nano, wall_ns
from .endpoint import PART_OPEN, PART_SUBLISTS, Endpoint, RequestContext, Response, json_response
from .gojson import JsonValue
from .params import BadRequest, Query
from .view import ServerView, SublistStats, SubscriptionInfo

SUBSCRIPTIONS_LIMIT_DEFAULT = 1024  # nats-server DefaultSubListSize


def is_valid_literal_subject(subject: str) -> bool:
    """nats-server IsValidLiteralSubject: every token non-empty and not a wildcard."""
    return all(token and token not in ("*", ">") for token in subject.split("."))


def subject_matches(literal: str, pattern: str) -> bool:
    """Would a message on `literal` reach a subscription on `pattern` (with * and > wildcards)?"""
    tokens = literal.split(".")
    parts = pattern.split(".")
    for index, part in enumerate(parts):
        if part == ">":
            return len(tokens) > index
        if index >= len(tokens) or (part != "*" and part != tokens[index]):
            return False
    return len(tokens) == len(parts)


def summed(stats: Iterable[SublistStats]) -> dict[str, JsonValue]:
    subscriptions = cache = inserts = removes = matches = hits = max_fanout = fanout = cached = 0
    for one in stats:
        subscriptions += one.num_subscriptions
        cache += one.num_cache
        inserts += one.num_inserts
        removes += one.num_removes
        matches += one.num_matches
        hits += one.cache_hits
        max_fanout = max(max_fanout, one.max_fanout)
        fanout += one.total_fanout
        cached += one.cached_results
    return {
        "num_subscriptions": subscriptions,
        "num_cache": cache,
        "num_inserts": inserts,
        "num_removes": removes,
        "num_matches": matches,
        "cache_hit_rate": hits / matches if matches else 0.0,
        "max_fanout": max_fanout,
        "avg_fanout": fanout / cached if fanout else 0.0,
    }


def detail_json(sub: SubscriptionInfo) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"account": sub.account, "account_tag": sub.account, "subject": sub.subject}
    if sub.queue:
        out["qgroup"] = sub.queue
    out["sid"] = sub.sid
    out["msgs"] = sub.msgs
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    out["cid"] = sub.cid
    return out


@dataclass(frozen=True, slots=True)
class SubszOptions:
    subscriptions: bool = False
    offset: int = 0
    limit: int = SUBSCRIPTIONS_LIMIT_DEFAULT
    account: str = ""
    test: str = ""


def decode(ctx: RequestContext) -> SubszOptions:
    query = ctx.query
    listed = query.boolean("subs")
    offset = query.integer("offset")
    limit = query.integer("limit")
    return SubszOptions(
        subscriptions=listed,
        offset=max(offset, 0),
        limit=limit if limit > 0 else SUBSCRIPTIONS_LIMIT_DEFAULT,
        account=query.get("acc"),
        test=query.get("test"),
    )


def subsz_json(view: ServerView, options: SubszOptions) -> dict[str, JsonValue]:
    test = options.test
    if test and not is_valid_literal_subject(test):
        raise BadRequest(f"invalid test subject, must be valid publish subject: {test}")
    account = options.account or None
    out: dict[str, JsonValue] = {"server_id": view.server_id, "now": rfc3339_nano(wall_ns(view.now_wall_s()))}
    out.update(summed(view.sublist_stats(account)))
    out.update({"total": 0, "offset": options.offset, "limit": options.limit})
    if options.subscriptions:
        subs = [s for s in view.subscriptions(account) if not test or subject_matches(test, s.subject)]
        out["total"] = len(subs)
        page = subs[options.offset : options.offset + options.limit]
        if page:
            out["subscriptions_list"] = [detail_json(s) for s in page]
    return out


def handle(ctx: RequestContext) -> Response:
    ctx.count()  # nats-server counts /subsz before decoding its parameters
    return json_response(subsz_json(ctx.view, decode(ctx)))


def needs(query: Query) -> frozenset[str]:
    """Sublist statistics; with `subs`, the subscriptions of the siblings' open connections too."""
    return frozenset({PART_SUBLISTS, PART_OPEN}) if query.boolean("subs") else frozenset({PART_SUBLISTS})


ENDPOINT = Endpoint(paths=("/subsz", "/subscriptionsz"), handle=handle, title="Subscriptions", needs=needs)
