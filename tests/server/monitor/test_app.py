"""Routing, headers, 404s, the index page and the per-endpoint request counters."""

import json

from appliance.server.monitor import ENDPOINTS, MonitorApp
from appliance.server.monitor.endpoint import Endpoint, RequestContext, Response, json_response
from appliance.testing.fake_view import FakeServerView, MonitorProbe


def test_json_pages_carry_go_headers_and_two_space_indentation(monitor: MonitorProbe) -> None:
    page = monitor.get("/varz")
    assert page.status == 200
    assert page.header("Content-Type") == "application/json"
    assert page.header("Access-Control-Allow-Origin") == "*"
    assert page.text.startswith('{\n  "server_id": ')


def test_unknown_paths_are_go_404s(monitor: MonitorProbe) -> None:
    for path in ("/nope", "/varz/", "/VARZ", "/connz/x"):
        page = monitor.get(path)
        assert page.status == 404
        assert page.text == "404 page not found\n"
        assert page.header("Content-Type") == "text/plain; charset=utf-8"
        assert page.header("X-Content-Type-Options") == "nosniff"


def test_index_links_every_endpoint(monitor: MonitorProbe) -> None:
    page = monitor.get("/")
    assert page.status == 200
    assert page.header("Content-Type") == "text/html; charset=utf-8"
    for endpoint in ENDPOINTS:
        if endpoint.paths[0] != "/":
            assert f'href=".{endpoint.paths[0]}"' in page.text


def test_http_req_stats_count_each_endpoint_including_the_current_varz(monitor: MonitorProbe) -> None:
    monitor.get("/")
    monitor.get("/connz")
    monitor.get("/connz", "subs=1")
    monitor.get("/subscriptionsz")
    monitor.get("/healthz")
    monitor.get("/nope")
    assert monitor.get("/varz").json["http_req_stats"] == {
        "/": 1,
        "/connz": 2,
        "/healthz": 1,
        "/subsz": 1,
        "/varz": 1,
    }


def test_stats_are_counted_where_nats_server_counts_them(monitor: MonitorProbe) -> None:
    """A /connz with a malformed parameter is not counted; /subsz and /healthz count before decoding."""
    assert monitor.get("/connz", "subs=x").status == 400
    assert monitor.get("/connz", "sort=bogus").status == 400  # decoded fine, fails later: counted
    assert monitor.get("/subsz", "subs=x").status == 400
    assert monitor.get("/healthz", "details=x").status == 400
    stats = monitor.get("/varz").json["http_req_stats"]
    assert stats == {"/connz": 1, "/healthz": 1, "/subsz": 1, "/varz": 1}


def test_bad_request_is_plain_text_without_cors(monitor: MonitorProbe) -> None:
    page = monitor.get("/connz", "auth=maybe")
    assert page.status == 400
    assert page.header("Content-Type") == "text/plain; charset=utf-8"
    assert page.header("Access-Control-Allow-Origin") is None
    assert (
        page.text
        == """Error decoding boolean for 'auth': strconv.ParseBool: parsing "maybe": invalid syntax"""
    )


def test_an_endpoint_is_one_module_added_to_the_table(view: FakeServerView) -> None:
    """How /routez, /jsz, /raftz will plug in: an Endpoint value, appended to ENDPOINTS."""

    def routez(ctx: RequestContext) -> Response:
        ctx.count()
        return json_response({"server_id": ctx.view.server_id, "num_routes": 0, "routes": []})

    endpoint = Endpoint(paths=("/routez",), handle=routez, title="Routes")
    app = MonitorApp(view, endpoints=(*ENDPOINTS, endpoint))
    page = app.respond("/routez", "")
    assert (page.status, json.loads(page.body)["num_routes"]) == (200, 0)
    assert b'href="./routez"' in app.respond("/", "").body
    assert json.loads(app.respond("/varz", "").body)["http_req_stats"] == {"/": 1, "/routez": 1, "/varz": 1}


def test_the_date_header_comes_from_the_view_clock(view: FakeServerView) -> None:
    assert MonitorApp(view).date_header() == "Sat, 21 Nov 2026 23:53:41 GMT"
