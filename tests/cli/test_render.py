"""Reports rendered from real nats-server 2.15.1 API answers (testdata/, captured on 127.0.0.1)."""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from appliance.cli.render_consumer import (
    consumer_info_text,
    consumer_list_table,
    next_message_header,
    parse_ack_subject,
)
from appliance.cli.render_stream import replica_text, stream_info_text, stream_list_table

TESTDATA = Path(__file__).parent / "testdata"


def load(name: str) -> dict[str, Any]:
    answer = json.loads((TESTDATA / name).read_text())
    assert isinstance(answer, dict)
    return answer


STREAM_INFO_R3 = """\
Information for Stream R3 created 2026-11-21T23:50:15Z

Configuration:

                Subjects: r3.>
                Replicas: 3
                 Storage: File

Options:

               Retention: Limits
         Acknowledgments: true
          Discard Policy: Old
        Duplicate Window: 2m0s
       Allows Msg Delete: true
  Allows Per-Message TTL: false
            Allows Purge: true
          Allows Rollups: false

Limits:

        Maximum Messages: unlimited
     Maximum Per Subject: unlimited
           Maximum Bytes: unlimited
             Maximum Age: unlimited
    Maximum Message Size: unlimited
       Maximum Consumers: unlimited

Cluster Information:

                    Name: C3
                  Leader: N1
                 Replica: N2, current, seen 0.81s ago
                 Replica: N3, current, seen 0.81s ago

State:

            Host Version: 2.15.1
      Required API Level: 0 hosted at level 5
                Messages: 6
                   Bytes: 225 B
          First Sequence: 1 @ 2026-11-21 23:50:15
           Last Sequence: 6 @ 2026-11-21 23:51:18
        Active Consumers: 2
      Number of Subjects: 1
"""


def test_stream_info_of_an_r3_stream_has_configuration_cluster_and_state() -> None:
    assert stream_info_text(load("stream_info_r3.json"), tz=UTC) == STREAM_INFO_R3


def test_stream_info_heading_is_in_the_local_zone() -> None:
    text = stream_info_text(load("stream_info_r3.json"), tz=timezone(timedelta(hours=1)))
    assert text.startswith("Information for Stream R3 created 2026-11-22T00:50:15+01:00\n")


def test_state_only_report_has_no_configuration() -> None:
    text = stream_info_text(load("stream_info_r3.json"), tz=UTC, state_only=True)
    assert text.startswith("State for Stream R3 created")
    assert "Configuration:" not in text and "Retention" not in text
    assert "Messages: 6" in text


def test_a_standalone_stream_has_no_cluster_block() -> None:
    info = load("stream_info_r3.json")
    info["cluster"] = {"leader": "S1"}
    assert "Cluster Information" not in stream_info_text(info, tz=UTC)


def test_limits_and_options_show_what_was_configured() -> None:
    info = load("stream_info_r3.json")
    info["config"].update(
        max_msgs=1000,
        max_bytes=1024 * 1024,
        max_age=86400 * 10**9,
        max_msg_size=1024,
        max_msgs_per_subject=5,
        discard="new",
        retention="workqueue",
        storage="memory",
        deny_delete=True,
        allow_rollup_hdrs=True,
        description="orders of the day",
        metadata={"owner": "ops", "_nats.ver": "2.15.1"},
    )
    text = stream_info_text(info, tz=UTC)
    for line in [
        "     Maximum Messages: 1,000",
        "        Maximum Bytes: 1.0 MiB",
        "          Maximum Age: 1d0h0m0s",
        " Maximum Message Size: 1.0 KiB",
        "  Maximum Per Subject: 5",
        "       Discard Policy: New",
        "            Retention: WorkQueue",
        "              Storage: Memory",
        "    Allows Msg Delete: false",
        "       Allows Rollups: true",
        "          Description: orders of the day",
        "Metadata:",
        "                owner: ops",
    ]:
        assert line in text
    assert "_nats.ver:" not in text


def test_replicas_read_like_the_seed_documents() -> None:
    assert (
        replica_text({"name": "n4-c1", "current": True, "active": 70_000_000})
        == "n4-c1, current, seen 0.07s ago"
    )
    assert (
        replica_text({"name": "n2-c1", "current": False, "active": 420_000_000})
        == "n2-c1, outdated, seen 0.42s ago"
    )
    assert (
        replica_text({"name": "N3", "current": False, "active": 0, "lag": 3, "offline": True})
        == "N3, outdated, OFFLINE, not seen, 3 operations behind"
    )


def test_stream_list_table_from_a_real_list_answer() -> None:
    answer = load("stream_list.json")
    now = datetime(2026, 11, 21, 23, 48, tzinfo=UTC)
    assert stream_list_table(answer["streams"], tz=UTC, now=now) == (
        "╭──────────────────────────────────────────────────────────────────────────────╮\n"
        "│                                   Streams                                    │\n"
        "├────────┬─────────────┬─────────────────────┬──────────┬───────┬──────────────┤\n"
        "│ Name   │ Description │ Created             │ Messages │ Size  │ Last Message │\n"
        "├────────┼─────────────┼─────────────────────┼──────────┼───────┼──────────────┤\n"
        "│ ORDERS │             │ 2026-11-21 23:47:57 │ 5        │ 308 B │ 3ms          │\n"
        "╰────────┴─────────────┴─────────────────────┴──────────┴───────┴──────────────╯\n"
    )


def test_stream_list_is_sorted_smallest_first() -> None:
    small = {"config": {"name": "SMALL"}, "state": {"bytes": 1}}
    big = {"config": {"name": "BIG"}, "state": {"bytes": 10_000}}
    text = stream_list_table([big, small], tz=UTC, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert text.index("SMALL") < text.index("BIG")
    assert "never" in text


def test_consumer_info_of_an_r3_consumer_with_a_lagging_replica() -> None:
    text = consumer_info_text(load("consumer_create_r3.json"), tz=UTC, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert text.startswith(
        "Information for Consumer R3 > D1 created 2026-11-21 23:50:15\n\nConfiguration:\n\n"
    )
    for line in [
        "                    Name: D1",
        "               Pull Mode: true",
        "              Ack Policy: Explicit",
        "                Ack Wait: 30.00s",
        "         Max Ack Pending: 1,000",
        "Cluster Information:",
        "                  Leader: N2",
        "                 Replica: N1, current, seen 0.00s ago",
        "                 Replica: N3, outdated, not seen",  # natscli: no lag or OFFLINE for consumers
        "  Last Delivered Message: Consumer sequence: 0 Stream sequence: 0",
        "        Outstanding Acks: 0 out of maximum 1,000",
        "    Unprocessed Messages: 3",
        "           Waiting Pulls: 0 of maximum 512",
    ]:
        assert line + "\n" in text
    assert "Durable Name" not in text  # equal to the name, as natscli hides it


def test_push_consumer_reports_interest_and_no_pull_rows() -> None:
    info = load("consumer_create_r3.json")
    info["config"].update(deliver_subject="deliver.here", ack_policy="none", deliver_group="workers")
    del info["config"]["max_waiting"]
    info["push_bound"] = True
    text = consumer_info_text(info, tz=UTC, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert "Delivery Subject: deliver.here" in text
    assert "Active Interest: Active using Queue Group workers" in text
    assert "Waiting Pulls" not in text and "Outstanding Acks" not in text and "Ack Wait" not in text


def test_last_activity_is_measured_from_the_answers_timestamp() -> None:
    info = load("consumer_create_r3.json")
    info["delivered"]["last_active"] = "2026-11-21T23:50:13.87550574Z"  # 2 s before "ts"
    text = consumer_info_text(info, tz=UTC, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert "Consumer sequence: 0 Stream sequence: 0 Last delivery: 2.00s ago" in text


def test_consumer_list_table() -> None:
    text = consumer_list_table(
        [load("consumer_create_r3.json")], tz=UTC, now=datetime(2030, 1, 1, tzinfo=UTC)
    )
    assert "│ Name │ Description │ Created             │ Ack Pending │ Unprocessed │ Last Delivery │" in text
    assert "│ D1   │             │ 2026-11-21 23:50:15 │ 0           │ 3           │ never         │" in text


def test_ack_subjects_of_both_versions_are_understood() -> None:
    v1 = parse_ack_subject("$JS.ACK.ORDERS.DUR1.1.2.3.1795304897620306264.4")
    v2 = parse_ack_subject("$JS.ACK._.xNZj6HOx.ORDERS.DUR1.1.2.3.1795304897620306264.4.extra")
    expected = {
        "delivered": 1,
        "stream_seq": 2,
        "consumer_seq": 3,
        "timestamp_ns": 1795304897620306264,
        "pending": 4,
    }
    assert v1 == v2 == expected
    assert parse_ack_subject("_INBOX.abc") is None
    assert parse_ack_subject("$JS.ACK.A.B.x.2.3.4.5") is None


def test_next_message_header_line() -> None:
    assert (
        next_message_header(
            "orders.new", "$JS.ACK.ORDERS.NEW.1.5.2.1795304897620306264.1234", clock_text="14:32:17"
        )
        == "[14:32:17] subj: orders.new / tries: 1 / cons seq: 2 / str seq: 5 / pending: 1,234"
    )
    assert next_message_header("a", "", clock_text="x") == "--- subject: a"


def test_rarer_config_and_state_rows_appear_only_when_set() -> None:
    info = load("stream_info_r3.json")
    info["config"].update(
        sealed=True,
        compression="s2",
        first_seq=100,
        allow_direct=True,
        placement={"cluster": "C3", "tags": ["ssd", "az:1"]},
        consumer_limits={"inactive_threshold": 300 * 10**9, "max_ack_pending": 50},
        discard="new",
        discard_new_per_subject=True,
        no_ack=True,
        republish={"src": ">", "dest": "rp.>", "headers_only": True},
    )
    info["state"].update(num_deleted=2)
    text = stream_info_text(info, tz=UTC)
    for line in [
        "Republishing Headers: > to rp.>",
        "Sealed: true",
        "Compression: S2 Compression",
        "First Sequence: 100",
        "Direct Get: true",
        "Placement Cluster: C3",
        "Placement Tags: ssd, az:1",
        "Consumer Inactive Threshold: 5m0s",
        "Consumer Max Ack Pending: 50",
        "Discard Policy: New Per Subject",
        "Acknowledgments: false",
        "Deleted Messages: 2",
    ]:
        assert line + "\n" in text
    plain = stream_info_text(load("stream_info_r3.json"), tz=UTC)
    for label in [
        "Republishing",
        "Sealed",
        "Compression",
        "Direct Get",
        "Placement",
        "Consumer Inactive",
        "Deleted Messages",
    ]:
        assert label not in plain


def test_the_cluster_block_built_by_the_server_prints_as_the_seed() -> None:
    """jetstream/cluster_info.py's block for an R3 stream led by n1-c1, rendered: the seed's lines
    (nats-server sorts the replicas by name; the seed's older server did not)."""
    from appliance.cluster.group import PeerInfo as GroupPeer
    from appliance.jetstream.cluster_info import ClusterContext, cluster_json
    from tests.jetstream.test_cluster_info import FakeGroup

    names = {"p1": "n1-c1", "p3": "n3-c1", "p4": "n4-c1"}
    group = FakeGroup("p1", "p1", ("p1", "p3", "p4"), commit=9, since_wall_s=1_700_000_000.0,
                      followers=[GroupPeer("p4", True, 0.07, 9), GroupPeer("p3", True, 0.07, 9)])
    info = load("stream_info_r3.json")
    info["cluster"] = json.loads(json.dumps(cluster_json(group, ClusterContext("C1", "n1-c1", "p1", names))))
    text = stream_info_text(info, tz=UTC)
    block = text[text.index("Cluster Information:") : text.index("State:")]
    assert [line.strip() for line in block.splitlines()] == [
        "Cluster Information:", "", "Name: C1", "Leader: n1-c1",
        "Replica: n3-c1, current, seen 0.07s ago", "Replica: n4-c1, current, seen 0.07s ago", "",
    ]
    consumer = load("consumer_create_r3.json")
    group.followers = [GroupPeer("p4", False, 12.5, 2), GroupPeer("p3", True, 0.07, 9)]
    info = json.loads(json.dumps(cluster_json(group, ClusterContext("C1", "n1-c1", "p1", names, offline={"p4"}))))
    consumer["cluster"] = info
    text = consumer_info_text(consumer, tz=UTC, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert "Replica: n4-c1, outdated, seen 12.50s ago\n" in text  # (stream info adds OFFLINE, lag)
    assert "n4-c1, outdated, OFFLINE, seen 12.50s ago, 7 operations behind" in stream_info_text(
        {**load("stream_info_r3.json"), "cluster": info}, tz=UTC)
