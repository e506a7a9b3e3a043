"""The monitoring endpoints as system-account requests, answered as nats-server answers them.

nats-server serves every monitoring endpoint over NATS too: a system-account user requests
`$SYS.REQ.SERVER.PING.<NAME>` (every server answers) or `$SYS.REQ.SERVER.<server_id>.<NAME>`, with
the endpoint's options as a JSON body (Go field names, e.g. `{"subscriptions":true,"acc":"A"}`) plus
the filter `server_name`, `cluster`, `host`, `exact_match`, `tags`, `domain` that decides whether this
server answers at all. The reply is compact JSON:

    {"server":{"name","host","id","cluster"?,"domain"?,"ver","tags"?,"feature_flags"?,"jetstream",
               "flags","seq","time"},
     "data":{<the same document as over HTTP>}}

with `"error":{"code":400,"description":...}` (and no data) when the options do not decode, or
`"data":null,"error":{"code":500,...}` when the endpoint refuses them. /healthz data carries
`status_code` here (HTTP has it in the status line instead).

The server owns the subscriptions and the message sequence: it calls `system_reply` with the
endpoint name, the request body and its next `seq`, and publishes the bytes to the reply subject
(None: filtered out, stay silent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .connz import CONNECTIONS_LIMIT_DEFAULT, ConnzOptions, connz_json
from appliance.durations import rfc3339_nano, wall_ns
from .endpoint import HttpStats
from .gojson import JsonValue, dumps
from .healthz import HealthzOptions, healthz_json
from .jsz import JszOptions, is_meta_leader, jsz_json
from .params import BadRequest
from .raftz import raftz_data
from .routez import routez_json
from .statsz import statsz_json
from .subsz import SUBSCRIPTIONS_LIMIT_DEFAULT, SubszOptions, subsz_json
from .varz import varz_json
from .view import ConnState, ServerView

SYSTEM_ENDPOINTS = ("VARZ", "CONNZ", "SUBSZ", "HEALTHZ", "ROUTEZ", "STATSZ", "JSZ", "RAFTZ")
JETSTREAM_ENABLED_FLAG = 1  # ServerCapability bit; we claim no other capability bits
CONN_STATES: dict[int, ConnState] = {0: "open", 1: "closed", 2: "any"}

# Go type of each option, by JSON name, as nats-server's *EventOptions structs declare them
FILTER_FIELDS = {
    "server_name": "string",
    "cluster": "string",
    "host": "string",
    "exact_match": "bool",
    "tags": "[]string",
    "domain": "string",
}
ENDPOINT_FIELDS: dict[str, tuple[str, dict[str, str]]] = {
    "VARZ": ("VarzEventOptions", {}),
    "STATSZ": ("StatszEventOptions", {}),
    "JSZ": (
        "JszEventOptions",
        {
            "account": "string",
            "accounts": "bool",
            "streams": "bool",
            "consumer": "bool",
            "config": "bool",
            "leader_only": "bool",
            "offset": "int",
            "limit": "int",
            "raft": "bool",
            "stream_leader_only": "bool",
        },
    ),
    "ROUTEZ": ("RoutezEventOptions", {"subscriptions": "bool", "subscriptions_detail": "bool"}),
    "RAFTZ": ("RaftzEventOptions", {"account": "string", "group": "string"}),
    "CONNZ": (
        "ConnzEventOptions",
        {
            "sort": "string",
            "auth": "bool",
            "subscriptions": "bool",
            "subscriptions_detail": "bool",
            "offset": "int",
            "limit": "int",
            "cid": "uint64",
            "mqtt_client": "string",
            "state": "int",
            "user": "string",
            "acc": "string",
            "filter_subject": "string",
        },
    ),
    "SUBSZ": (
        "SubszEventOptions",
        {"offset": "int", "limit": "int", "subscriptions": "bool", "account": "string", "test": "string"},
    ),
    "HEALTHZ": (
        "HealthzEventOptions",
        {
            "js-enabled": "bool",
            "js-enabled-only": "bool",
            "js-server-only": "bool",
            "js-meta-only": "bool",
            "account": "string",
            "stream": "string",
            "consumer": "string",
            "details": "bool",
        },
    ),
}
_GO_INT = re.compile(r"-?(0|[1-9][0-9]*)")
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


class OptionsError(ValueError):
    """The request body does not decode into the endpoint's options (Go's json.Unmarshal error text)."""


@dataclass(frozen=True, slots=True)
class GoNumber:
    """A JSON number kept as its literal text, as Go's decoder sees it."""

    text: str


def _json_kind(value: object) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, GoNumber):
        return "number"
    return "array" if isinstance(value, list) else "object"


def _convert(value: object, go_type: str, where: str) -> object:
    """One option value as Go's json.Unmarshal would store it; OptionsError otherwise."""

    def refuse(what: str) -> OptionsError:
        return OptionsError(f"json: cannot unmarshal {what} into Go struct field {where} of type {go_type}")

    if go_type == "bool" and isinstance(value, bool):
        return value
    if go_type == "string" and isinstance(value, str):
        return value
    if go_type in ("int", "uint64") and isinstance(value, GoNumber):
        number = int(value.text) if _GO_INT.fullmatch(value.text) else None
        low, high = (INT64_MIN, INT64_MAX) if go_type == "int" else (0, UINT64_MAX)
        if number is None or not low <= number <= high:
            raise refuse(f"number {value.text}")
        return number
    if go_type == "[]string" and isinstance(value, list):
        for item in value:
            if not isinstance(item, str):
                raise OptionsError(
                    f"json: cannot unmarshal {_json_kind(item)} into Go struct field {where} of type string"
                )
        return list(value)
    raise refuse(_json_kind(value))


def _not_json(constant: str) -> object:
    """NaN and Infinity are Python extensions of JSON; Go's decoder stops at their first letter."""
    raise ValueError(f"invalid character '{constant.lstrip('-')[0]}' looking for beginning of value")


def decode_options(name: str, body: bytes) -> dict[str, object]:
    """The options of a request body by JSON name; absent and null options are left out."""
    struct, fields = ENDPOINT_FIELDS[name]
    if not body.strip():
        return {}
    try:
        document = json.loads(body, parse_int=GoNumber, parse_float=GoNumber, parse_constant=_not_json)
    except (ValueError, RecursionError) as problem:
        raise OptionsError(str(problem)) from problem
    if document is None:
        return {}
    if not isinstance(document, dict):
        kind = _json_kind(document)
        raise OptionsError(f"json: cannot unmarshal {kind} into Go value of type server.{struct}")
    known = {**fields, **FILTER_FIELDS}
    folded = {key.casefold(): key for key in known}
    options: dict[str, object] = {}
    for raw_key, value in document.items():
        key = raw_key if raw_key in known else folded.get(raw_key.casefold())  # Go matches names loosely
        if key is None or value is None:
            continue
        options[key] = _convert(value, known[key], f"{struct}.{key}")
    return options


def is_filtered_out(view: ServerView, options: Mapping[str, object]) -> bool:
    """nats-server filterRequest: True when the request is not meant for this server."""
    name, host, cluster = (str(options.get(k, "")) for k in ("server_name", "host", "cluster"))
    if options.get("exact_match"):
        mismatched = (
            (name and name != view.server_name)
            or (host and host != view.client_host)
            or (cluster and cluster != view.cluster_name)
        )
    else:
        mismatched = (
            (name and name not in view.server_name)
            or (host and host not in view.client_host)
            or (cluster and cluster not in view.cluster_name)
        )
    if mismatched:
        return True
    tags = options.get("tags", [])
    assert isinstance(tags, list)
    if any(tag not in view.options.server_tags for tag in tags):
        return True
    domain = options.get("domain", "")
    return bool(domain) and domain != view.options.jetstream.domain


def server_info_json(view: ServerView, *, seq: int) -> dict[str, JsonValue]:
    js = view.jetstream()
    running = js is not None and js.enabled
    out: dict[str, JsonValue] = {"name": view.server_name, "host": view.client_host, "id": view.server_id}
    if view.cluster_name:
        out["cluster"] = view.cluster_name
    if js is not None and js.domain:
        out["domain"] = js.domain
    out["ver"] = view.version
    if view.options.server_tags:
        out["tags"] = list[JsonValue](view.options.server_tags)
    if view.feature_flags:
        out["feature_flags"] = dict[str, JsonValue](sorted(view.feature_flags.items()))
    out["jetstream"] = running
    out["flags"] = JETSTREAM_ENABLED_FLAG if running else 0
    out["seq"] = seq
    out["time"] = rfc3339_nano(wall_ns(view.now_wall_s()))
    return out


def _text(options: Mapping[str, object], key: str) -> str:
    return str(options.get(key, ""))


def _number(options: Mapping[str, object], key: str) -> int:
    value = options.get(key, 0)
    assert isinstance(value, int)
    return value


def _flag(options: Mapping[str, object], key: str) -> bool:
    return options.get(key) is True


def connz_options(options: Mapping[str, object]) -> ConnzOptions:
    limit = _number(options, "limit")
    return ConnzOptions(
        sort=_text(options, "sort"),
        auth=_flag(options, "auth"),
        subs=_flag(options, "subscriptions"),
        subs_detail=_flag(options, "subscriptions_detail"),
        offset=max(_number(options, "offset"), 0),
        limit=limit if limit > 0 else CONNECTIONS_LIMIT_DEFAULT,
        cid=_number(options, "cid"),
        state=CONN_STATES.get(_number(options, "state")),
        user=_text(options, "user"),
        account=_text(options, "acc"),
        filter_subject=_text(options, "filter_subject"),
        mqtt_client=_text(options, "mqtt_client"),
    )


def subsz_options(options: Mapping[str, object]) -> SubszOptions:
    limit = _number(options, "limit")
    return SubszOptions(
        subscriptions=_flag(options, "subscriptions"),
        offset=max(_number(options, "offset"), 0),
        limit=limit if limit > 0 else SUBSCRIPTIONS_LIMIT_DEFAULT,
        account=_text(options, "account"),
        test=_text(options, "test"),
    )


def jsz_options(options: Mapping[str, object]) -> JszOptions:
    """nats-server's JSzOptions; offset, limit and stream_leader_only change nothing here."""
    return JszOptions(account=_text(options, "account") or None, accounts=_flag(options, "accounts"),
                      streams=_flag(options, "streams"), consumers=_flag(options, "consumer"),
                      config=_flag(options, "config"), raft=_flag(options, "raft"),
                      leader_only=_flag(options, "leader_only"))


def healthz_options(options: Mapping[str, object]) -> HealthzOptions:
    return HealthzOptions(
        js_enabled_only=_flag(options, "js-enabled-only") or _flag(options, "js-enabled"),
        js_server_only=_flag(options, "js-server-only"),
        js_meta_only=_flag(options, "js-meta-only"),
        account=_text(options, "account"),
        stream=_text(options, "stream"),
        consumer=_text(options, "consumer"),
        details=_flag(options, "details"),
    )


def endpoint_data(view: ServerView, stats: HttpStats, name: str, options: Mapping[str, object]) -> JsonValue:
    """The `data` document of one endpoint; BadRequest when the endpoint refuses the options."""
    if name == "VARZ":
        return varz_json(view, stats.snapshot())
    if name == "CONNZ":
        return connz_json(view, connz_options(options))
    if name == "SUBSZ":
        return subsz_json(view, subsz_options(options))
    if name == "ROUTEZ":
        return routez_json(view, _flag(options, "subscriptions") or _flag(options, "subscriptions_detail"))
    if name == "STATSZ":
        return statsz_json(view)
    if name == "JSZ":
        return jsz_json(view, jsz_options(options))
    if name == "RAFTZ":
        return raftz_data(view, account=_text(options, "account"), group=_text(options, "group"))
    assert name == "HEALTHZ", name
    code, body = healthz_json(view, healthz_options(options))
    status = body.pop("status")
    return {"status": status, "status_code": code, **body}


def system_reply(view: ServerView, stats: HttpStats, name: str, body: bytes, *, seq: int) -> bytes | None:
    """The reply to `$SYS.REQ.SERVER.PING.<name>` or `$SYS.REQ.SERVER.<id>.<name>`; None to stay silent."""
    assert name in SYSTEM_ENDPOINTS, name
    reply: dict[str, JsonValue] = {}
    try:
        options = decode_options(name, body)
    except OptionsError as problem:
        reply["error"] = {"code": 400, "description": str(problem)}
    else:
        if is_filtered_out(view, options):
            return None
        if name == "JSZ" and _flag(options, "leader_only") and not is_meta_leader(view):
            return None  # nats-server: only the meta leader answers (errSkipZreq)
        try:
            # a statsz answer (`$SYS.REQ.SERVER.PING` itself, or .STATSZ) is a ServerStatsMsg: "statsz"
            reply["statsz" if name == "STATSZ" else "data"] = endpoint_data(view, stats, name, options)
        except BadRequest as refusal:
            reply["data"] = None
            reply["error"] = {"code": 500, "description": str(refusal)}
    return dumps({"server": server_info_json(view, seq=seq), **reply}, indented=False)


def system_subjects(server_id: str) -> list[tuple[str, str]]:
    """(subject, endpoint name) pairs the server subscribes to in the system account."""
    pairs = [("$SYS.REQ.SERVER.PING", "STATSZ")]
    pairs += [(f"$SYS.REQ.SERVER.PING.{name}", name) for name in SYSTEM_ENDPOINTS]
    return pairs + [(f"$SYS.REQ.SERVER.{server_id}.{name}", name) for name in SYSTEM_ENDPOINTS]
