"""From `consumer add` flags to a JetStream ConsumerConfig (pure).

Without `--defaults` the kind (`--pull` or `--deliver SUBJECT`) and `--ack` must be given, or on a
terminal natscli's questions ask for them (consumer_questions.py); with it, natscli's answers
apply: pull, explicit ack, deliver all, instant replay. Fields not given are left out so the
server's defaults apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.cli.stream_config import FlagError, parse_duration_ns

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConsumerFlags:
    pull: bool = False
    deliver_subject: str | None = None
    deliver_group: str | None = None
    ack_policy: str | None = None
    filters: tuple[str, ...] = ()
    deliver_policy: str | None = None
    start_seq: int | None = None
    replay: str | None = None
    max_deliver: int | None = None
    max_pending: int | None = None
    max_waiting: int | None = None
    ack_wait: str | None = None
    heartbeat: str | None = None
    flow_control: bool | None = None
    inactive_threshold: str | None = None
    replicas: int | None = None
    description: str | None = None
    headers_only: bool | None = None


def missing_flags(flags: ConsumerFlags) -> list[str]:
    """The flags `consumer add` needs without --defaults (on a terminal it asks for them instead)."""
    return ([] if flags.pull or flags.deliver_subject is not None else ["--pull or --deliver SUBJECT"]) + (
        [] if flags.ack_policy else ["--ack"])


def consumer_config(name: str, flags: ConsumerFlags, *, use_defaults: bool) -> JsonDict:
    """The ConsumerConfig of `consumer add NAME`, durable under NAME."""
    if flags.pull and flags.deliver_subject:
        raise FlagError("--pull and --deliver are exclusive")
    push = flags.deliver_subject is not None
    if not use_defaults:
        missing = missing_flags(flags)
        if missing:
            raise FlagError(f"{', '.join(missing)} required (or pass --defaults); not asking: stdin is not a "
                            "terminal")
    config: JsonDict = {
        "name": name,
        "durable_name": name,
        "deliver_policy": flags.deliver_policy or "all",
        "ack_policy": flags.ack_policy or "explicit",
        "replay_policy": flags.replay or "instant",
    }
    if push:
        config["deliver_subject"] = flags.deliver_subject
        _maybe(config, "deliver_group", flags.deliver_group)
    elif flags.deliver_group or flags.heartbeat or flags.flow_control:
        raise FlagError("--deliver-group, --heartbeat and --flow-control need a push consumer (--deliver)")
    if config["deliver_policy"] == "by_start_sequence":
        if flags.start_seq is None:
            raise FlagError("--deliver-policy by_start_sequence needs --start-seq")
        config["opt_start_seq"] = flags.start_seq
    elif flags.start_seq is not None:
        raise FlagError("--start-seq needs --deliver-policy by_start_sequence")
    subjects = [subject for value in flags.filters for subject in value.split(",") if subject]
    if len(subjects) == 1:
        config["filter_subject"] = subjects[0]
    elif subjects:
        config["filter_subjects"] = subjects
    _maybe(config, "description", flags.description)
    _maybe(config, "max_deliver", flags.max_deliver)
    _maybe(config, "max_ack_pending", flags.max_pending)
    _maybe(config, "max_waiting", flags.max_waiting)
    _maybe(config, "num_replicas", flags.replicas)
    _maybe(config, "flow_control", flags.flow_control)
    if flags.headers_only:
        config["headers_only"] = True
    for key, text, flag in (
        ("ack_wait", flags.ack_wait, "--wait"),
        ("idle_heartbeat", flags.heartbeat, "--heartbeat"),
        ("inactive_threshold", flags.inactive_threshold, "--inactive-threshold"),
    ):
        if text is not None:
            config[key] = parse_duration_ns(text, flag=flag)
    return config


def _maybe(config: JsonDict, key: str, value: object) -> None:
    if value is not None:
        config[key] = value
