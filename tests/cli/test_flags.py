"""From flags to the StreamConfig / ConsumerConfig requests (pure), and the flag value syntax."""

import pytest

from appliance.cli.consumer_config import ConsumerFlags, consumer_config
from appliance.cli.stream_config import (
    DEFAULTS,
    FlagError,
    StreamFlags,
    edited_stream_config,
    flags_to_fields,
    new_stream_config,
    parse_duration_ns,
    parse_size,
)

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("2m", 120 * S),
        ("1h30m", 5400 * S),
        ("500ms", S // 2),
        ("1d", 86400 * S),
        ("1w", 7 * 86400 * S),
        ("1.5s", 1_500_000_000),
        ("90", 90 * S),
        ("0", 0),
        ("1y", 365 * 86400 * S),
        ("10us", 10_000),
    ],
)
def test_durations(text: str, ns: int) -> None:
    assert parse_duration_ns(text, flag="--max-age") == ns


@pytest.mark.parametrize("text", ["", "m", "2x", "1h 2m", "-1s", "1.2.3s"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(FlagError, match="--max-age"):
        parse_duration_ns(text, flag="--max-age")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1024", 1024),
        ("1K", 1024),
        ("1KB", 1024),
        ("1KiB", 1024),
        ("10MB", 10 * 1024**2),
        ("1g", 1024**3),
        ("2TB", 2 * 1024**4),
        ("-1", -1),
        ("0", 0),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, flag="--max-bytes") == size


@pytest.mark.parametrize("text", ["", "lots", "1XB", "-2", "-1K", "1.5G"])
def test_bad_sizes_name_the_flag(text: str) -> None:
    with pytest.raises(FlagError, match="--max-bytes"):
        parse_size(text, flag="--max-bytes")


def test_add_with_defaults_fills_natscli_answers_and_keeps_the_flags() -> None:
    config = new_stream_config("ORDERS", StreamFlags(subjects=("orders.>",), replicas=3), use_defaults=True)
    assert config == {**DEFAULTS, "name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3}


def test_add_without_defaults_requires_the_essential_flags() -> None:
    with pytest.raises(FlagError, match="--subjects, --storage, --replicas required"):
        new_stream_config("ORDERS", StreamFlags(), use_defaults=False)
    config = new_stream_config(
        "ORDERS", StreamFlags(subjects=("a,b", "c"), storage="memory", replicas=1), use_defaults=False
    )
    assert config["subjects"] == ["a", "b", "c"]
    assert config["storage"] == "memory"


def test_every_flag_maps_to_its_api_field() -> None:
    flags = StreamFlags(
        subjects=("x.>",),
        description="d",
        replicas=3,
        storage="file",
        retention="workqueue",
        discard="new",
        max_msgs=10,
        max_bytes="1KB",
        max_age="1h",
        max_msg_size="512",
        max_msgs_per_subject=2,
        max_consumers=4,
        dupe_window="30s",
        allow_rollup=True,
        deny_delete=True,
        deny_purge=False,
        allow_direct=True,
    )
    assert flags_to_fields(flags) == {
        "subjects": ["x.>"],
        "description": "d",
        "num_replicas": 3,
        "storage": "file",
        "retention": "workqueue",
        "discard": "new",
        "max_msgs": 10,
        "max_bytes": 1024,
        "max_age": 3600 * S,
        "max_msg_size": 512,
        "max_msgs_per_subject": 2,
        "max_consumers": 4,
        "duplicate_window": 30 * S,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "deny_purge": False,
        "allow_direct": True,
    }


def test_edit_changes_only_what_was_given() -> None:
    current = {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "max_msgs": -1,
        "metadata": {"_nats.ver": "2.15.1"},
    }
    edited = edited_stream_config(current, StreamFlags(max_msgs=100))
    assert edited == {**current, "max_msgs": 100}
    with pytest.raises(FlagError, match="nothing to change"):
        edited_stream_config(current, StreamFlags())


def test_consumer_defaults_are_a_durable_pull_consumer_with_explicit_ack() -> None:
    assert consumer_config("NEW", ConsumerFlags(), use_defaults=True) == {
        "name": "NEW",
        "durable_name": "NEW",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "replay_policy": "instant",
    }


def test_consumer_without_defaults_needs_kind_and_ack() -> None:
    with pytest.raises(FlagError, match="--pull or --deliver SUBJECT, --ack required"):
        consumer_config("C", ConsumerFlags(), use_defaults=False)
    with pytest.raises(FlagError, match="--ack required"):
        consumer_config("C", ConsumerFlags(pull=True), use_defaults=False)


def test_push_consumer_flags() -> None:
    config = consumer_config(
        "P",
        ConsumerFlags(
            deliver_subject="out",
            deliver_group="g",
            ack_policy="none",
            heartbeat="5s",
            flow_control=True,
            filters=("a", "b"),
            max_deliver=3,
            ack_wait="1m",
        ),
        use_defaults=False,
    )
    assert config["deliver_subject"] == "out" and config["deliver_group"] == "g"
    assert config["idle_heartbeat"] == 5 * S and config["flow_control"] is True
    assert config["filter_subjects"] == ["a", "b"] and "filter_subject" not in config
    assert config["max_deliver"] == 3 and config["ack_wait"] == 60 * S


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (ConsumerFlags(pull=True, deliver_subject="x"), "exclusive"),
        (ConsumerFlags(pull=True, heartbeat="1s"), "need a push consumer"),
        (ConsumerFlags(pull=True, deliver_policy="by_start_sequence"), "needs --start-seq"),
        (ConsumerFlags(pull=True, start_seq=5), "needs --deliver-policy by_start_sequence"),
    ],
)
def test_contradicting_consumer_flags_are_refused(flags: ConsumerFlags, message: str) -> None:
    with pytest.raises(FlagError, match=message):
        consumer_config("C", flags, use_defaults=True)


def test_start_sequence_and_single_filter() -> None:
    config = consumer_config(
        "C",
        ConsumerFlags(
            pull=True,
            ack_policy="all",
            deliver_policy="by_start_sequence",
            start_seq=7,
            filters=("orders.new",),
            max_pending=5,
            replicas=1,
            max_waiting=10,
        ),
        use_defaults=False,
    )
    assert (config["opt_start_seq"], config["filter_subject"], config["max_ack_pending"]) == (
        7,
        "orders.new",
        5,
    )
    assert (config["ack_policy"], config["num_replicas"], config["max_waiting"]) == ("all", 1, 10)
