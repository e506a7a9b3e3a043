"""/connz: fields, subscriptions, auth, filters, sorting and paging as nats-server does them."""

import pytest

from appliance.server.monitor.view import SubscriptionInfo
from appliance.testing.fake_view import FakeServerView, MonitorProbe

CONN_KEYS = [
    "cid", "kind", "type", "ip", "port", "start", "last_activity", "rtt", "uptime", "idle", "pending_bytes",
    "in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions", "name", "lang", "version",
]  # fmt: skip


def holder(view: FakeServerView, cid: int = 5, **fields: object) -> None:
    subs = (
        SubscriptionInfo("foo.>", "1", cid, "$G"),
        SubscriptionInfo("bar", "2", cid, "$G", queue="q1", msgs=1),
    )
    values: dict[str, object] = {
        "name": "holder",
        "lang": "python3",
        "version": "2.16.0",
        "subscriptions": subs,
    }
    values.update(fields)
    view.connect(cid, **values)


def test_one_connection_like_a_live_nats_server(monitor: MonitorProbe, view: FakeServerView) -> None:
    holder(view, rtt_s=0.000839999)
    view.clock.advance(0.5)
    connz = monitor.get("/connz").json
    assert list(connz) == ["server_id", "now", "num_connections", "total", "offset", "limit", "connections"]
    assert (connz["num_connections"], connz["total"], connz["offset"], connz["limit"]) == (1, 1, 0, 1024)
    conn = connz["connections"][0]
    assert list(conn) == CONN_KEYS
    assert (conn["cid"], conn["kind"], conn["type"], conn["ip"]) == (5, "Client", "nats", "127.0.0.1")
    assert conn["rtt"] == "839µs"  # truncated to microseconds below 1ms
    assert (conn["uptime"], conn["idle"], conn["subscriptions"]) == ("0s", "0s", 2)


def test_subs_lists_subjects_and_detail_lists_subscriptions(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    holder(view)
    assert monitor.get("/connz", "subs=1").json["connections"][0]["subscriptions_list"] == ["foo.>", "bar"]
    detail = monitor.get("/connz", "subs=detail").json["connections"][0]
    assert "subscriptions_list" not in detail
    assert detail["subscriptions_list_detail"] == [
        {"subject": "foo.>", "sid": "1", "msgs": 0, "cid": 5},
        {"subject": "bar", "qgroup": "q1", "sid": "2", "msgs": 1, "cid": 5},
    ]


def test_a_connection_without_subscriptions_has_no_list(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1)
    conn = monitor.get("/connz", "subs=1").json["connections"][0]
    assert "subscriptions_list" not in conn
    assert "name" not in conn  # omitempty


def test_auth_adds_user_account_and_name_tag(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1, authorized_user="alice", account="A")
    view.connect(2, authorized_user="bob")  # in $G: no `account` key
    assert "authorized_user" not in monitor.get("/connz").json["connections"][0]
    first, second = monitor.get("/connz", "auth=true").json["connections"]
    assert (first["authorized_user"], first["account"], first["name_tag"]) == ("alice", "A", "A")
    assert (second["authorized_user"], second["name_tag"]) == ("bob", "$G")
    assert "account" not in second


def test_closed_connections_keep_their_stop_and_reason(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1)
    view.connect(2)
    view.clock.advance(65)
    view.close(2, reason="Slow Consumer (Pending Bytes)")
    view.clock.advance(100)
    assert [c["cid"] for c in monitor.get("/connz").json["connections"]] == [1]
    closed = monitor.get("/connz", "state=closed").json["connections"]
    assert [c["cid"] for c in closed] == [2]
    assert closed[0]["reason"] == "Slow Consumer (Pending Bytes)"
    assert closed[0]["stop"] == "2026-11-21T23:54:46Z"
    assert closed[0]["uptime"] == "1m5s"  # measured to the stop, not to now
    assert list(closed[0])[7:9] == ["stop", "reason"]
    assert [c["cid"] for c in monitor.get("/connz", "state=any").json["connections"]] == [1, 2]


def test_no_connections_is_an_empty_list(monitor: MonitorProbe) -> None:
    connz = monitor.get("/connz").json
    assert connz["connections"] == []
    assert connz["total"] == 0


def test_unknown_account_answers_like_nats_server(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1)
    connz = monitor.get("/connz", "acc=nope").json
    assert connz["server_id"] == ""
    assert connz["connections"] is None


def test_account_and_user_filters(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.account_names.append("A")
    view.connect(1, account="A", authorized_user="alice")
    view.connect(2, account="A", authorized_user="bob")
    view.connect(3, authorized_user="alice")
    assert [c["cid"] for c in monitor.get("/connz", "acc=A").json["connections"]] == [1, 2]
    by_user = monitor.get("/connz", "user=alice").json
    assert [c["cid"] for c in by_user["connections"]] == [1, 3]
    assert by_user["total"] == 3  # nats-server counts before the user filter
    both = monitor.get("/connz", "acc=A&user=alice").json
    assert [c["cid"] for c in both["connections"]] == [1]


def test_cid_selects_one_connection(monitor: MonitorProbe, view: FakeServerView) -> None:
    for cid in (1, 2, 3):
        view.connect(cid)
    connz = monitor.get("/connz", "cid=2").json
    assert [c["cid"] for c in connz["connections"]] == [2]
    assert (connz["limit"], connz["total"]) == (1, 3)
    view.close(3)
    assert monitor.get("/connz", "cid=3").json["connections"] == []
    assert [c["cid"] for c in monitor.get("/connz", "cid=3&state=closed").json["connections"]] == [3]


def test_offset_and_limit_page_the_sorted_list(monitor: MonitorProbe, view: FakeServerView) -> None:
    for cid in range(1, 8):
        view.connect(cid)
    page = monitor.get("/connz", "offset=2&limit=3").json
    assert [c["cid"] for c in page["connections"]] == [3, 4, 5]
    assert (page["num_connections"], page["total"], page["offset"], page["limit"]) == (3, 7, 2, 3)
    assert monitor.get("/connz", "offset=50").json["connections"] == []
    defaults = monitor.get("/connz", "offset=-4&limit=0").json
    assert (defaults["offset"], defaults["limit"]) == (0, 1024)


@pytest.mark.parametrize(
    ("sort", "field", "expected"),
    [
        ("cid", "cid", [1, 2, 3]),
        ("start", "cid", [1, 2, 3]),
        ("subs", "subscriptions", [3, 1, 2]),
        ("pending", "pending_bytes", [2, 3, 1]),
        ("msgs_to", "out_msgs", [3, 2, 1]),
        ("msgs_from", "in_msgs", [1, 3, 2]),
        ("bytes_to", "out_bytes", [2, 1, 3]),
        ("bytes_from", "in_bytes", [3, 1, 2]),
        ("rtt", "rtt", [2, 1, 3]),
    ],
)
def test_sort_orders(
    monitor: MonitorProbe, view: FakeServerView, sort: str, field: str, expected: list[int]
) -> None:
    def subs(cid: int, count: int) -> tuple[SubscriptionInfo, ...]:
        return tuple(SubscriptionInfo(f"s.{i}", str(i), cid, "$G") for i in range(count))

    # cid: (subscriptions, pending, out msgs, in msgs, out bytes, in bytes, rtt)
    table = {1: (2, 1, 1, 9, 50, 5, 0.002), 2: (1, 9, 5, 1, 90, 1, 0.009), 3: (3, 5, 9, 5, 10, 9, 0.001)}
    for cid, (count, pending, out_msgs, in_msgs, out_bytes, in_bytes, rtt_s) in table.items():
        view.connect(
            cid,
            subscriptions=subs(cid, count),
            pending_bytes=pending,
            out_msgs=out_msgs,
            in_msgs=in_msgs,
            out_bytes=out_bytes,
            in_bytes=in_bytes,
            rtt_s=rtt_s,
        )
    assert [c["cid"] for c in monitor.get("/connz", f"sort={sort}").json["connections"]] == expected


def test_time_sorts(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1)
    view.clock.advance(10)
    view.connect(2)
    view.clock.advance(10)
    view.connect(3)
    view.update(1, last_activity_wall_s=view.clock.wall())
    view.clock.advance(5)
    assert [c["cid"] for c in monitor.get("/connz", "sort=last").json["connections"]] == [1, 3, 2]
    assert [c["cid"] for c in monitor.get("/connz", "sort=idle").json["connections"]] == [2, 1, 3]
    assert [c["cid"] for c in monitor.get("/connz", "sort=uptime").json["connections"]] == [3, 2, 1]


def test_ties_keep_cid_order(monitor: MonitorProbe, view: FakeServerView) -> None:
    for cid in (4, 2, 9, 1):
        view.connect(cid)
    assert [c["cid"] for c in monitor.get("/connz", "sort=msgs_to").json["connections"]] == [1, 2, 4, 9]


def test_closed_only_sorts(monitor: MonitorProbe, view: FakeServerView) -> None:
    for cid in (1, 2, 3):
        view.connect(cid)
    view.close(2, reason="Stale Connection")
    view.clock.advance(1)
    view.close(1, reason="Client Closed")
    view.clock.advance(1)
    view.close(3, reason="Read Error")
    assert [c["cid"] for c in monitor.get("/connz", "state=closed&sort=stop").json["connections"]] == [
        3,
        1,
        2,
    ]
    assert [c["cid"] for c in monitor.get("/connz", "state=closed&sort=reason").json["connections"]] == [
        1,
        3,
        2,
    ]
    page = monitor.get("/connz", "sort=stop")
    assert (page.status, page.text) == (400, "sort by stop only valid on closed connections")
    page = monitor.get("/connz", "sort=reason&state=any")
    assert (page.status, page.text) == (400, "sort by reason only valid on closed connections")


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("sort=bogus", "invalid sorting option: bogus"),
        ("state=bogus", "Error decoding state for bogus"),
        ("cid=-1", """Error decoding uint64 for 'cid': strconv.ParseUint: parsing "-1": invalid syntax"""),
        ("offset=x", """Error decoding int for 'offset': strconv.Atoi: parsing "x": invalid syntax"""),
        ("limit=1.5", """Error decoding int for 'limit': strconv.Atoi: parsing "1.5": invalid syntax"""),
        (
            "subs=maybe",
            """Error decoding boolean for 'subs': strconv.ParseBool: parsing "maybe": invalid syntax""",
        ),
    ],
)
def test_bad_parameters_are_400_with_nats_server_text(monitor: MonitorProbe, query: str, text: str) -> None:
    page = monitor.get("/connz", query)
    assert (page.status, page.text) == (400, text)


def test_rtt_outside_the_microsecond_band_is_not_truncated(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    view.connect(1, rtt_s=0.0012345)
    view.connect(2, rtt_s=0.0)
    first, second = monitor.get("/connz").json["connections"]
    assert first["rtt"] == "1.2345ms"
    assert second["rtt"] == "0s"


def test_closed_connections_are_snapshots_like_nats_server_keeps_them(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    holder(view, cid=5)
    view.connect(6, account="A", authorized_user="alice")
    view.close(5)
    view.close(6)
    detail = monitor.get("/connz", "state=closed&subs=detail").json["connections"][0]
    assert detail["subscriptions_list_detail"][1] == {
        "account": "$G",
        "account_tag": "$G",
        "subject": "bar",
        "qgroup": "q1",
        "sid": "2",
        "msgs": 1,
        "cid": 5,
    }
    in_global, in_a = monitor.get("/connz", "state=closed&auth=1").json["connections"]
    assert "name_tag" not in in_global
    assert (in_a["account"], in_a["name_tag"], in_a["authorized_user"]) == ("A", "A", "alice")


def test_an_mqtt_client_filter_matches_nothing_here(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.connect(1)
    page = monitor.get("/connz", "mqtt_client=sensor-1").json
    assert (page["connections"], page["total"]) == ([], 1)
