"""Strict request decoding as nats-server's (JetStream `strict: true`) json.Unmarshal does it.

Every request type declares its fields with a kind; unknown fields, wrong JSON types and bad enum
values raise JsApiError 10025 with Go's texts. Decoding is pure: bytes in, a dict of checked
values out.
"""

from __future__ import annotations

import json
from typing import Literal

from appliance.jetstream import errors

Kind = (
    Literal["str", "int", "uint", "bool", "strs", "ints", "object", "strmap", "time", "any"] | tuple[str, ...]
)
GO_TYPE = {
    "str": "string",
    "int": "int64",
    "uint": "uint64",
    "bool": "bool",
    "strs": "[]string",
    "ints": "[]time.Duration",
    "object": "struct",
    "strmap": "map[string]string",
    "time": "time.Time",
    "any": "interface {}",
}
JsonObject = dict[str, object]


def invalid_json(text: str) -> errors.JsApiError:
    return errors.INVALID_JSON.format(err=text)


def json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def parse_json(data: bytes) -> object:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        char = data[exc.pos : exc.pos + 1].decode(errors="replace")
        if exc.msg.startswith("Expecting property name"):
            text = f"invalid character '{char}' looking for beginning of object key string"
        elif exc.msg.startswith("Expecting value") and exc.pos >= len(data):
            raise invalid_json("unexpected end of JSON input") from None
        else:
            text = f"invalid character '{char}' looking for beginning of value"
        raise invalid_json(f"{text} at offset {exc.pos + 1}") from None


def _check(value: object, kind: Kind, where: str) -> object:
    if value is None:
        return None
    if isinstance(kind, tuple):
        if not isinstance(value, str) or value not in kind:
            raise invalid_json(f"can not unmarshal {json.dumps(json.dumps(value))}")
        return value
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "uint": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "bool": isinstance(value, bool),
        "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "ints": isinstance(value, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
        "object": isinstance(value, dict),
        "strmap": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
        "time": isinstance(value, str),
        "any": True,
    }[kind]
    if not ok:
        if kind == "int" and isinstance(value, float) and value.is_integer():
            return int(value)
        raise invalid_json(
            f"json: cannot unmarshal {json_kind(value)} into Go struct field {where} of type {GO_TYPE[kind]}"
        )
    return value


def decode_object(data: bytes | object, fields: dict[str, Kind], struct: str) -> JsonObject:
    """Decode (if bytes) and check one JSON object against its declared fields."""
    obj = parse_json(data) if isinstance(data, (bytes, bytearray)) else data
    if not isinstance(obj, dict):
        raise invalid_json(f"json: cannot unmarshal {json_kind(obj)} into Go value of type server.{struct}")
    result: JsonObject = {}
    for key, value in obj.items():
        kind = fields.get(key)
        if kind is None:
            raise invalid_json(f'json: unknown field "{key}"')
        checked = _check(value, kind, f"{struct}.{key}")
        if checked is not None:
            result[key] = checked
    return result


def request_body(data: bytes) -> bytes:
    """nats-server parses a body only when it starts with `{` or `[`; anything else is empty."""
    stripped = data.strip()
    return stripped if stripped[:1] in (b"{", b"[") else b""
