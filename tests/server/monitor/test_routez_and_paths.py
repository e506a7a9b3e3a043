"""/routez renders `ServerView.routes()` in nats-server's RouteInfo shape (the captured /routez of a
nats-server 2.15.1 cluster node); unclean paths redirect as Go's ServeMux redirects them."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from appliance.server.monitor.app import clean_path
from appliance.server.monitor.view import RouteInfo
from appliance.testing.fake_view import FakeServerView, MonitorProbe

CAPTURE = Path("/work/shared/spec/captures/n1_routez.json")


def route(rid: int, **fields: object) -> RouteInfo:
    values: dict[str, object] = dict(
        remote_id="NAQVKIR7D2R2AJATWTGFOCYIB47HBTAQRL4VWDT7YOOXM23EISSLYGY3", remote_name="N2", did_solicit=True,
        is_configured=True, ip="127.0.0.1", port=49698 + rid, start_wall_s=1_795_305_068.0,
        last_activity_wall_s=1_795_305_068.1, rtt_s=0.000177, pending_size=0, in_msgs=0, out_msgs=0,
        in_bytes=0, out_bytes=0, subscriptions=())
    values.update(fields)
    return RouteInfo(rid=rid, **values)  # type: ignore[arg-type]


def test_routes_of_the_view_in_nats_servers_shape(view: FakeServerView, monitor: MonitorProbe) -> None:
    view.route_list = [route(39, in_msgs=3, subscriptions=("a.b", "c.>")), route(38)]
    page = monitor.get("/routez")
    assert page.status == 200
    assert page.json["num_routes"] == 2
    assert [r["rid"] for r in page.json["routes"]] == [38, 39]
    first = page.json["routes"][0]
    assert first["rtt"] == "177µs" and first["subscriptions"] == 0 and first["compression"] == "off"
    assert page.json["routes"][1]["subscriptions"] == 2 and "subscriptions_list" not in page.json["routes"][1]
    assert monitor.get("/routez", "subs=1").json["routes"][1]["subscriptions_list"] == ["a.b", "c.>"]
    if CAPTURE.exists():  # the key order of nats-server's RouteInfo, from a real cluster node
        captured = json.loads(CAPTURE.read_text())
        assert list(page.json) == list(captured)
        assert list(first) == list(captured["routes"][0])


def test_no_routes_is_an_empty_list(monitor: MonitorProbe) -> None:
    page = monitor.get("/routez")
    assert (page.json["num_routes"], page.json["routes"]) == (0, [])


def test_unclean_paths_redirect_with_their_query(monitor: MonitorProbe) -> None:
    for path, location in (("//varz", "/varz"), ("/a/../connz", "/connz"), ("/./subsz/", "/subsz/"),
                           ("/../..//", "/")):
        page = monitor.get(path, "subs=1")
        assert (page.status, page.header("Location")) == (307, f"{location}?subs=1")
        assert page.text == f'<a href="{location}?subs=1">Temporary Redirect</a>.\n\n'
    assert monitor.get("/varz/").status == 404  # clean already (Go keeps a trailing slash): not found


@given(st.lists(st.sampled_from(["", ".", "..", "a", "varz", "b.c"]), max_size=6), st.booleans())
def test_clean_path_is_clean_and_idempotent(elements: list[str], trailing: bool) -> None:
    path = "/" + "/".join(elements) + ("/" if trailing else "")
    cleaned = clean_path(path)
    assert cleaned.startswith("/") and "//" not in cleaned
    assert not any(part in (".", "..") for part in cleaned.split("/"))
    assert clean_path(cleaned) == cleaned
