"""`server report jetstream` rendered from real nats-server 2.15.1 JSZ answers (testdata/
jsz_report_c1*.json: a 3-node cluster C1, meta leader n2-c1, streams R1/R3/ORDERS(R3)/LOGS(R1,
memory)), laid out as natscli's reportJetStream draws it (go-pretty: a column of plain ints, the
meta Pending, is right-aligned)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from appliance.cli.render_report import compact_strings, jetstream_report, meta_group_table

TESTDATA = Path(__file__).parent / "testdata"


def load(name: str) -> list[dict[str, Any]]:
    answers = json.loads((TESTDATA / name).read_text())
    assert isinstance(answers, list)
    return answers


SUMMARY = """\
╭───────────────────────────────────────────────────────────────────────────────────────────────────╮
│                                         JetStream Summary                                         │
├────────┬─────────┬─────────┬───────────┬──────────┬────────┬────────┬─────────┬─────────┬─────────┤
│ Server │ Cluster │ Streams │ Consumers │ Messages │ Bytes  │ Memory │ File    │ API Req │ Pending │
├────────┼─────────┼─────────┼───────────┼──────────┼────────┼────────┼─────────┼─────────┼─────────┤
│ n1-c1  │ C1      │ 3       │ 3         │ 8        │ 799 B  │ 0 B    │ 799 B   │ 1       │       0 │
│ n2-c1* │ C1      │ 3       │ 2         │ 1,242    │ 37 KiB │ 36 KiB │ 799 B   │ 1       │       0 │
│ n3-c1  │ C1      │ 2       │ 2         │ 8        │ 799 B  │ 0 B    │ 799 B   │ 1       │       0 │
├────────┼─────────┼─────────┼───────────┼──────────┼────────┼────────┼─────────┼─────────┼─────────┤
│        │         │ 8       │ 7         │ 1,258    │ 38 KiB │ 36 KiB │ 2.3 KiB │ 3       │       0 │
╰────────┴─────────┴─────────┴───────────┴──────────┴────────┴────────┴─────────┴─────────┴─────────╯

╭───────────────────────────────────────────────────────────────────────╮
│             RAFT Meta Group Information - Lead cluster: C1            │
├─────────────────┬──────────┬────────┬─────────┬────────┬────────┬─────┤
│ Connection Name │ ID       │ Leader │ Current │ Online │ Active │ Lag │
├─────────────────┼──────────┼────────┼─────────┼────────┼────────┼─────┤
│ n1-c1           │ oP5LzZ64 │        │ true    │ true   │ 347ms  │ 0   │
│ n2-c1           │ YGhnH3VX │ yes    │ true    │ true   │ 0s     │ 0   │
│ n3-c1           │ hxTjz3J4 │        │ true    │ true   │ 347ms  │ 0   │
╰─────────────────┴──────────┴────────┴─────────┴────────┴────────┴─────╯
"""

LEADERS = """
╭──────────────────────────────────────────────────╮
│                RAFT Leader Report                │
├────────┬─────────┬────────────────┬──────────────┤
│ Server │ Cluster │ Stream Leaders │ Distribution │
├────────┼─────────┼────────────────┼──────────────┤
│ n1-c1  │ C1      │ 1              │ ***          │
│ n3-c1  │ C1      │ 1              │ ***          │
│ n2-c1  │ C1      │ 2              │ *****        │
╰────────┴─────────┴────────────────┴──────────────╯

╭────────────────────────────────────────────────────╮
│                 RAFT Leader Report                 │
├────────┬─────────┬──────────────────┬──────────────┤
│ Server │ Cluster │ Consumer Leaders │ Distribution │
├────────┼─────────┼──────────────────┼──────────────┤
│ n2-c1  │ C1      │ 0                │              │
│ n3-c1  │ C1      │ 0                │              │
│ n1-c1  │ C1      │ 3                │ **********   │
╰────────┴─────────┴──────────────────┴──────────────╯

"""


def test_summary_and_meta_group_of_a_three_node_cluster() -> None:
    assert jetstream_report(load("jsz_report_c1.json")) == SUMMARY


def test_leaders_add_the_raft_leader_reports() -> None:
    assert jetstream_report(load("jsz_report_c1.json"), leaders=True) == SUMMARY + LEADERS


def test_account_report_counts_the_account_details() -> None:
    text = jetstream_report(load("jsz_report_c1_account.json"), account="APP")
    lines = text.splitlines()
    assert "JetStream Summary for Account APP" in lines[1]
    assert lines[5].split("│")[1:-1] == [" n1-c1  ", " C1      ", " 3       ", " 3         ", " 8        ",
                                         " 38 KiB  ", " 36 KiB  ", " 2.3 KiB ", " 3       ", "       0 "]
    assert "RAFT Meta Group Information - Lead cluster: C1" in text


def test_sorting_by_messages_and_the_leaderless_warning() -> None:
    answers = load("jsz_report_c1.json")
    by_msgs = jetstream_report(answers, sort="msgs").splitlines()
    assert by_msgs[7].startswith("│ n2-c1* ")  # the most messages last
    for answer in answers:
        answer["data"]["meta_cluster"].pop("leader")
    text = jetstream_report(answers)
    assert "*" not in text.split("\n")[5] and "RAFT Meta Group" not in text
    assert text.endswith(
        "╯\n\n\nWARNING: No cluster meta leader found. The cluster expects 3 nodes but only 3 responded. "
        "JetStream operation requires at least 2 up nodes.\n"
    )


def test_standalone_servers_have_no_meta_group_section() -> None:
    answers = copy.deepcopy(load("jsz_report_c1.json"))[:1]
    del answers[0]["data"]["meta_cluster"]
    answers[0]["data"]["config"] = {"domain": "hub"}
    text = jetstream_report(answers)
    assert text.splitlines()[3].startswith("│ Server │ Cluster │ Domain │ Streams ")
    assert "RAFT" not in text and text.endswith("╯\n\n")


def test_offline_and_lagging_meta_members() -> None:
    meta = {"name": "C1", "leader": "a.example.com", "peer": "AAAA",
            "replicas": [{"name": "b.example.com", "current": False, "offline": True, "active": 75 * 10**9,
                          "lag": 1234, "peer": "BBBB"}]}
    rows = meta_group_table(meta).splitlines()[5:7]
    assert rows == ["│ a               │ AAAA │ yes    │ true    │ true   │ 0s     │ 0     │",
                    "│ b               │ BBBB │        │ false   │ false  │ 1m15s  │ 1,234 │"]


def test_compact_strings_drop_the_shared_domain_but_never_the_first_label() -> None:
    assert compact_strings(["n1.a.example.com", "n2.b.example.com"]) == ["n1.a", "n2.b"]
    assert compact_strings(["n1.example.com", "n2.example.com"]) == ["n1", "n2"]
    assert compact_strings(["x.com", "x.com"]) == ["x", "x"]
    assert compact_strings(["n1-c1", "n2-c1"]) == ["n1-c1", "n2-c1"]
    assert compact_strings([]) == []
