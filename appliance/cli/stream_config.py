"""From `stream add|edit` flags to a JetStream StreamConfig (pure), and the flag values' syntax.

Durations are Go durations with natscli's extra units (`1d`, `1w`, `1M`, `1y`) or a bare number
of seconds; sizes are bytes with an optional 1024-based suffix (`1K`, `10MB`, `1GiB`); `-1` means
unlimited. Only fields the user gave (or `--defaults` implies) are set, so the server's own
defaults apply to the rest and an edit changes nothing it was not told to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from appliance.cli.format import NS_PER_MS, NS_PER_S, NS_PER_US

JsonDict = dict[str, Any]

_UNIT_NS = {
    "ns": 1,
    "us": NS_PER_US,
    "µs": NS_PER_US,
    "ms": NS_PER_MS,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
    "w": 7 * 86400 * NS_PER_S,
    "M": 30 * 86400 * NS_PER_S,
    "y": 365 * 86400 * NS_PER_S,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w|M|y)")
_SIZE = re.compile(r"^(-?\d+)\s*([KMGTP]?)(i?B?)$", re.IGNORECASE)
_SIZE_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


class FlagError(ValueError):
    """A flag value does not parse; the text names the flag."""


def parse_duration_ns(text: str, *, flag: str) -> int:
    """`2m`, `1h30m`, `1d`, `500ms`, `90` (seconds), `0` → nanoseconds."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text) * NS_PER_S
    total, position = 0.0, 0
    for found in _DURATION_PART.finditer(text):
        if found.start() != position:
            break
        total += float(found.group(1)) * _UNIT_NS[found.group(2)]
        position = found.end()
    if position != len(text) or not text:
        raise FlagError(f"{flag}: invalid duration {text!r} (examples: 30s, 2m, 1h30m, 1d)")
    return int(total)


def parse_size(text: str, *, flag: str) -> int:
    """`1024`, `1K`, `10MB`, `1GiB`, `-1` → bytes (1024-based multipliers, as natscli)."""
    found = _SIZE.match(text.strip())
    if found is None:
        raise FlagError(f"{flag}: invalid size {text!r} (examples: 1024, 1KB, 10MiB, 1G, -1)")
    number, power = int(found.group(1)), int(_SIZE_POWER[found.group(2).upper()])
    if number < 0:
        if number != -1 or power:
            raise FlagError(f"{flag}: only -1 (unlimited) may be negative")
        return -1
    return number << (10 * power)


@dataclass(frozen=True, slots=True)
class StreamFlags:
    """What the user passed; None means "not given"."""

    subjects: tuple[str, ...] = ()
    description: str | None = None
    replicas: int | None = None
    storage: str | None = None
    retention: str | None = None
    discard: str | None = None
    max_msgs: int | None = None
    max_bytes: str | None = None
    max_age: str | None = None
    max_msg_size: str | None = None
    max_msgs_per_subject: int | None = None
    max_consumers: int | None = None
    dupe_window: str | None = None
    allow_rollup: bool | None = None
    deny_delete: bool | None = None
    deny_purge: bool | None = None
    allow_direct: bool | None = None


# natscli's answers to its own questions under --defaults.
DEFAULTS: JsonDict = {
    "retention": "limits",
    "storage": "file",
    "discard": "old",
    "num_replicas": 1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msg_size": -1,
    "max_msgs_per_subject": -1,
    "max_consumers": -1,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
}
REQUIRED_WITHOUT_DEFAULTS = (
    ("subjects", "--subjects"),
    ("storage", "--storage"),
    ("num_replicas", "--replicas"),
)


def split_subjects(values: tuple[str, ...]) -> list[str]:
    return [subject.strip() for value in values for subject in value.split(",") if subject.strip()]


def flags_to_fields(flags: StreamFlags) -> JsonDict:
    """Only the StreamConfig fields the flags set."""
    fields: JsonDict = {}
    subjects = split_subjects(flags.subjects)
    if subjects:
        fields["subjects"] = subjects
    plain = {
        "description": flags.description,
        "num_replicas": flags.replicas,
        "storage": flags.storage,
        "retention": flags.retention,
        "discard": flags.discard,
        "max_msgs": flags.max_msgs,
        "max_msgs_per_subject": flags.max_msgs_per_subject,
        "max_consumers": flags.max_consumers,
        "allow_rollup_hdrs": flags.allow_rollup,
        "deny_delete": flags.deny_delete,
        "deny_purge": flags.deny_purge,
        "allow_direct": flags.allow_direct,
    }
    fields.update({key: value for key, value in plain.items() if value is not None})
    for key, text, flag in (
        ("max_bytes", flags.max_bytes, "--max-bytes"),
        ("max_msg_size", flags.max_msg_size, "--max-msg-size"),
    ):
        if text is not None:
            fields[key] = parse_size(text, flag=flag)
    for key, text, flag in (
        ("max_age", flags.max_age, "--max-age"),
        ("duplicate_window", flags.dupe_window, "--dupe-window"),
    ):
        if text is not None:
            fields[key] = parse_duration_ns(text, flag=flag)
    return fields


def missing_flags(flags: StreamFlags) -> list[str]:
    """The flags `stream add` needs without --defaults (on a terminal it asks for them instead)."""
    fields = flags_to_fields(flags)
    return [flag for key, flag in REQUIRED_WITHOUT_DEFAULTS if key not in fields]


def new_stream_config(name: str, flags: StreamFlags, *, use_defaults: bool) -> JsonDict:
    """The StreamConfig of `stream add`: flags over natscli's defaults (with --defaults)."""
    fields = flags_to_fields(flags)
    if not use_defaults:
        missing = missing_flags(flags)
        if missing:
            raise FlagError(f"{', '.join(missing)} required (or pass --defaults); not asking: stdin is not a "
                            "terminal")
    return {"name": name, **DEFAULTS, **fields}


def edited_stream_config(current: JsonDict, flags: StreamFlags) -> JsonDict:
    """The StreamConfig of `stream edit`: the server's current config with the given flags applied."""
    fields = flags_to_fields(flags)
    if not fields:
        raise FlagError("nothing to change: pass at least one configuration flag")
    return {**current, **fields}
