"""The structure of a monitoring JSON answer, for differential tests against nats-server: keys
recursively, leaves by JSON type, list elements as a set of shapes."""

from __future__ import annotations

import json
from typing import Any

# Go maps (not structs) of the monitoring pages: their keys are data, only their value types count
MAP_KEYS = frozenset({"http_req_stats"})


def shape(value: Any, skip: frozenset[str] = frozenset()) -> Any:
    """The shape of `value`; `skip`: top-level keys left out."""
    if isinstance(value, dict):
        return {
            key: {"map of": sorted({json.dumps(shape(v)) for v in item.values()})}
            if key in MAP_KEYS
            else shape(item)
            for key, item in value.items()
            if key not in skip
        }
    if isinstance(value, list):
        return sorted({json.dumps(shape(item), sort_keys=True) for item in value})
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"  # Go writes 2.0 as 2: a parser cannot tell int from float
    return type(value).__name__
