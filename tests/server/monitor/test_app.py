"""Routing, headers, 404s, the index page and the per-endpoint request counters."""

from appliance.server.monitor import ENDPOINTS
from appliance.testing.fake_view import MonitorProbe


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
