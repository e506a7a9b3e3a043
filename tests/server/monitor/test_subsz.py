"""/subsz: summed sublist statistics, the subscription list, paging and the `test` subject filter."""

import pytest

from appliance.server.monitor.subsz import is_valid_literal_subject, subject_matches
from appliance.server.monitor.view import SublistStats, SubscriptionInfo
from appliance.testing.fake_view import FakeServerView, MonitorProbe

STATS_KEYS = [
    "server_id", "now", "num_subscriptions", "num_cache", "num_inserts", "num_removes", "num_matches",
    "cache_hit_rate", "max_fanout", "avg_fanout", "total", "offset", "limit",
]  # fmt: skip


def scene(view: FakeServerView) -> None:
    view.internal_subscriptions = [SubscriptionInfo("$SYS.REQ.SERVER.PING", "11", 1, "$SYS")]
    view.connect(5, subscriptions=(
        SubscriptionInfo("foo.>", "1", 5, "$G"),
        SubscriptionInfo("bar", "2", 5, "$G", queue="q1", msgs=1),
        SubscriptionInfo("foo.*.baz", "3", 5, "$G", max_msgs=10),
    ))  # fmt: skip


def test_without_subs_only_statistics(monitor: MonitorProbe, view: FakeServerView) -> None:
    scene(view)
    subsz = monitor.get("/subsz").json
    assert list(subsz) == STATS_KEYS
    assert (subsz["num_subscriptions"], subsz["total"], subsz["limit"]) == (4, 0, 1024)


def test_statistics_sum_accounts_like_nats_server(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.stats_by_account = {
        "$G": SublistStats(num_subscriptions=2, num_cache=7, num_inserts=5, num_removes=3, num_matches=8,
                           cache_hits=1, max_fanout=1, total_fanout=5, cached_results=7),
        "$SYS": SublistStats(num_subscriptions=60, num_inserts=60, num_matches=8, cache_hits=3, max_fanout=4,
                             total_fanout=3, cached_results=1),
    }  # fmt: skip
    subsz = monitor.get("/subsz").json
    assert subsz["num_subscriptions"] == 62
    assert (subsz["num_cache"], subsz["num_inserts"], subsz["num_removes"], subsz["num_matches"]) == (
        7,
        65,
        3,
        16,
    )
    assert subsz["cache_hit_rate"] == 0.25  # (1 + 3) / 16
    assert subsz["max_fanout"] == 4
    assert subsz["avg_fanout"] == 1.0  # (5 + 3) / (7 + 1)
    only_g = monitor.get("/subsz", "acc=$G").json
    assert (only_g["num_subscriptions"], only_g["cache_hit_rate"], only_g["avg_fanout"]) == (2, 0.125, 5 / 7)


def test_subs_lists_every_subscription_with_account(monitor: MonitorProbe, view: FakeServerView) -> None:
    scene(view)
    subsz = monitor.get("/subsz", "subs=1").json
    assert subsz["total"] == 4
    g = {"account": "$G", "account_tag": "$G"}
    assert subsz["subscriptions_list"] == [
        {
            "account": "$SYS",
            "account_tag": "$SYS",
            "subject": "$SYS.REQ.SERVER.PING",
            "sid": "11",
            "msgs": 0,
            "cid": 1,
        },
        g | {"subject": "foo.>", "sid": "1", "msgs": 0, "cid": 5},
        g | {"subject": "bar", "qgroup": "q1", "sid": "2", "msgs": 1, "cid": 5},
        g | {"subject": "foo.*.baz", "sid": "3", "msgs": 0, "max": 10, "cid": 5},
    ]


def test_account_filter_and_paging(monitor: MonitorProbe, view: FakeServerView) -> None:
    scene(view)
    subsz = monitor.get("/subsz", "subs=1&acc=$G&offset=1&limit=1").json
    assert (subsz["total"], subsz["offset"], subsz["limit"]) == (3, 1, 1)
    assert [s["subject"] for s in subsz["subscriptions_list"]] == ["bar"]
    empty = monitor.get("/subsz", "subs=1&offset=10").json
    assert (empty["total"], "subscriptions_list" in empty) == (4, False)


def test_test_subject_lists_only_matching_subscriptions(monitor: MonitorProbe, view: FakeServerView) -> None:
    scene(view)
    subsz = monitor.get("/subsz", "subs=1&test=foo.x.baz").json
    assert [s["subject"] for s in subsz["subscriptions_list"]] == ["foo.>", "foo.*.baz"]
    assert subsz["total"] == 2
    assert monitor.get("/subsz", "test=bar").json["total"] == 0  # without subs nothing is listed


def test_test_subject_must_be_literal(monitor: MonitorProbe) -> None:
    page = monitor.get("/subsz", "test=foo.*")
    assert (page.status, page.text) == (400, "invalid test subject, must be valid publish subject: foo.*")


def test_subscriptionsz_is_the_same_endpoint(monitor: MonitorProbe, view: FakeServerView) -> None:
    scene(view)
    assert monitor.get("/subscriptionsz", "subs=1").json["total"] == 4


@pytest.mark.parametrize(
    ("literal", "pattern", "matches"),
    [
        ("foo", "foo", True),
        ("foo.bar", "foo.*", True),
        ("foo", "foo.*", False),
        ("foo.bar.baz", "foo.>", True),
        ("foo", "foo.>", False),
        ("foo.bar", ">", True),
        ("foo.bar", "*.bar", True),
        ("foo.bar", "foo.bar.baz", False),
        ("foo.bar.baz", "foo.bar", False),
    ],
)
def test_subject_matching(literal: str, pattern: str, matches: bool) -> None:
    assert subject_matches(literal, pattern) is matches


@pytest.mark.parametrize(
    ("subject", "valid"),
    [
        ("foo.bar", True),
        ("foo", True),
        ("foo.*", False),
        ("foo.>", False),
        ("foo..bar", False),
        (".foo", False),
        ("*x.y", True),
    ],
)
def test_literal_subjects(subject: str, valid: bool) -> None:
    assert is_valid_literal_subject(subject) is valid
