"""Message and server-list text (pure)."""

import json
from datetime import UTC, datetime
from pathlib import Path

from appliance.cli.render_message import (
    body_text,
    parse_header_block,
    stored_message_text,
    sub_message_text,
    view_message_text,
)
from appliance.cli.render_server import HEADERS, meta_group, server_list_table


def test_body_is_followed_by_natscli_blank_lines() -> None:
    assert body_text(b"hello") == "hello\n\n\n"
    assert body_text(b"hello\n") == "hello\n\n"
    assert body_text(b"") == "nil body\n\n\n"


def test_header_blocks_as_msg_get_returns_them() -> None:
    block = b"NATS/1.0\r\nX-Trace: 1\r\nX-Trace: 2\r\nNats-Msg-Id: abc\r\n\r\n"
    assert parse_header_block(block) == {"X-Trace": ["1", "2"], "Nats-Msg-Id": ["abc"]}


def test_sub_message() -> None:
    assert sub_message_text(1, "orders.new", "", {}, b"hi") == '[#1] Received on "orders.new"\nhi\n\n\n'
    assert (
        sub_message_text(2, "a", "_INBOX.x", {"K": "v"}, b"")
        == '[#2] Received on "a" with reply "_INBOX.x"\nK: v\n\nnil body\n\n\n'
    )


def test_view_hides_server_headers() -> None:
    text = view_message_text(
        5, "orders.new", "2026-01-01 00:00:00", {"Nats-Sequence": ["5"], "X-Trace": ["1"]}, b"x"
    )
    assert text == "[5] Subject: orders.new Received: 2026-01-01 00:00:00\n\n  X-Trace: 1\nx\n\n\n"


def test_stored_message_from_a_msg_get_answer() -> None:
    message = {
        "subject": "orders.new",
        "seq": 5,
        "hdrs": "TkFUUy8xLjANClgtVHJhY2U6IDENCg0K",
        "data": "aGk=",
        "time": "2026-11-21T23:47:57.042863119Z",
    }
    text = stored_message_text("ORDERS", message, now=datetime(2026, 11, 21, 23, 47, 59, 42863, tzinfo=UTC))
    assert text.startswith("Item: ORDERS#5 received ")
    assert "(2.00s) on Subject orders.new\n\nHeaders:\n  X-Trace: 1\n\nhi\n\n\n" in text


def test_server_list_table_with_totals() -> None:
    def statsz(name: str, conns: int) -> dict[str, object]:
        return {
            "server": {
                "name": name,
                "host": "127.0.0.1",
                "cluster": "C1",
                "ver": "2.15.1",
                "jetstream": True,
                "time": "2026-01-01T01:00:00Z",
            },
            "statsz": {
                "start": "2026-01-01T00:00:00Z",
                "mem": 1024 * 1024,
                "cores": 2,
                "cpu": 1.4,
                "connections": conns,
                "subscriptions": 10,
                "slow_consumers": 0,
                "routes": [{}, {}],
                "gateways": [],
            },
        }

    text = server_list_table([(statsz("n2-c1", 1), 2_400_000), (statsz("n1-c1", 1234), 1_000_000)])
    lines = text.splitlines()
    assert "Server Overview" in lines[1]
    assert [cell.strip() for cell in lines[3].split("│")[1:-1]] == HEADERS
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines[5:7]]
    assert rows[0] == [
        "n1-c1",
        "C1",
        "127.0.0.1",
        "2.15.1",
        "yes",
        "1,234",
        "10",
        "2",
        "0",
        "1.0 MiB",
        "1",
        "2",
        "0",
        "1h0m0s",
        "1ms",
    ]
    assert rows[1][0] == "n2-c1" and rows[1][-1] == "2ms"
    footer = [cell.strip() for cell in lines[8].split("│")[1:-1]]
    assert footer[:7] == ["", "1", "2", "", "2", "1,235", "20"]
    assert footer[9] == "2.0 MiB"


def test_meta_group_from_a_real_jsz_answer() -> None:
    answer = json.loads((Path(__file__).parent / "testdata" / "jsz_leader_only.json").read_text())
    meta = meta_group(answer)
    assert meta["leader"] == "N1"
    assert [replica["name"] for replica in meta["replicas"]] == ["N2"]
    assert meta_group({}) == {}
