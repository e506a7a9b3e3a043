"""/healthz: nats-server's checks, status codes and texts, with and without details."""

from appliance.server.monitor.view import ConsumerHealth, JetStreamView, StreamHealth
from appliance.testing.fake_view import FakeServerView, MonitorProbe


def js(**overrides: object) -> JetStreamView:
    values: dict[str, object] = {
        "enabled": True,
        "clustered": True,
        "max_memory": 1 << 30,
        "max_storage": 1 << 34,
        "store_dir": "/tmp/js/jetstream",
        "sync_interval_s": 120.0,
    }
    values.update(overrides)
    return JetStreamView(**values)  # type: ignore[arg-type]


def test_a_plain_server_is_ok_in_compact_json(monitor: MonitorProbe) -> None:
    page = monitor.get("/healthz")
    assert (page.status, page.text) == (200, '{"status":"ok"}')
    assert page.header("Content-Type") == "application/json"
    assert monitor.get("/healthz", "js-enabled-only=true").text == '{"status":"ok"}'


def test_not_ready_is_500(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.not_ready_reason = "failed to be ready for connections after 1ms"
    page = monitor.get("/healthz")
    assert page.status == 500
    assert page.json == {"status": "error", "error": "failed to be ready for connections after 1ms"}
    detailed = monitor.get("/healthz", "details=true")
    assert detailed.status == 500
    assert detailed.json == {
        "status": "error",
        "errors": [{"type": "CONNECTION", "error": "failed to be ready for connections after 1ms"}],
    }


def test_stream_without_account_is_400(monitor: MonitorProbe) -> None:
    page = monitor.get("/healthz", "stream=S")
    assert page.status == 400
    assert (
        page.text
        == '{"status":"error","error":"\\"account\\" must not be empty when checking stream health"}'
    )
    page = monitor.get("/healthz", "account=A&consumer=C")
    assert (page.status, page.json["error"]) == (
        400,
        '"stream" must not be empty when checking consumer health',
    )
    detailed = monitor.get("/healthz", "stream=S&details=1")
    assert detailed.status == 400
    assert detailed.json["errors"][0]["type"] == "BAD_REQUEST"


def test_jetstream_not_running_is_503(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = js(enabled=False)
    page = monitor.get("/healthz")
    assert (page.status, page.json) == (
        503,
        {"status": "unavailable", "error": "JetStream not enabled (10076)"},
    )
    assert monitor.get("/healthz", "js-server-only=true").status == 200


def test_leaderless_meta_is_503_unless_only_enabled_is_asked(
    monitor: MonitorProbe, view: FakeServerView
) -> None:
    view.jetstream_view = js(meta_state="no_leader")
    page = monitor.get("/healthz")
    assert page.status == 503
    assert page.json == {
        "status": "unavailable",
        "error": "JetStream has not established contact with a meta leader",
    }
    assert monitor.get("/healthz", "js-enabled-only=true").status == 200
    assert monitor.get("/healthz", "js-enabled=true").status == 200  # deprecated spelling
    assert monitor.get("/healthz", "js-server-only=true").status == 200
    detailed = monitor.get("/healthz", "details=true")
    assert detailed.text == (
        '{"status":"error","errors":[{"type":"JETSTREAM",'
        '"error":"JetStream has not established contact with a meta leader"}]}'
    )


def test_meta_problem_texts(monitor: MonitorProbe, view: FakeServerView) -> None:
    texts = {
        "recovering": "JetStream is still recovering meta layer",
        "not_current": "JetStream is not current with the meta leader",
        "not_running": "JetStream meta layer is not running",
        "write_error": "JetStream meta layer write error: disk full",
        "apply_error": "JetStream meta layer apply error: disk full",
    }
    for state, text in texts.items():
        view.jetstream_view = js(meta_state=state, meta_detail="disk full")
        page = monitor.get("/healthz")
        assert (page.status, page.json["error"]) == (503, text)


def held_streams() -> tuple[StreamHealth, ...]:
    return (
        StreamHealth(
            "A", "ORDERS", consumers=(ConsumerHealth("C1"), ConsumerHealth("C2", "not_current", "lagging"))
        ),
        StreamHealth("A", "EVENTS", "not_current", "no quorum"),
        StreamHealth("B", "LOGS"),
    )


def test_js_meta_only_skips_assets(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = js(accounts=("A", "B"), streams=held_streams())
    assert monitor.get("/healthz").status == 503
    assert monitor.get("/healthz", "js-meta-only=true").status == 200


def test_first_unhealthy_asset_answers_without_details(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = js(accounts=("A", "B"), streams=held_streams())
    page = monitor.get("/healthz")
    assert page.json == {
        "status": "unavailable",
        "error": "JetStream consumer 'A > ORDERS > C2' is not current: lagging",
    }
    assert monitor.get("/healthz", "account=B").status == 200
    assert monitor.get("/healthz", "account=A&stream=ORDERS&consumer=C1").status == 200


def test_details_list_every_unhealthy_asset(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = js(accounts=("A", "B"), streams=held_streams())
    page = monitor.get("/healthz", "details=true")
    assert page.status == 503
    assert page.json == {
        "status": "error",
        "errors": [
            {"type": "CONSUMER", "account": "A", "stream": "ORDERS", "consumer": "C2",
             "error": "JetStream consumer 'A > ORDERS > C2' is not current: lagging"},
            {"type": "STREAM", "account": "A", "stream": "EVENTS",
             "error": "JetStream stream 'A > EVENTS' is not current: no quorum"},
        ],
    }  # fmt: skip


def test_missing_assets_are_404(monitor: MonitorProbe, view: FakeServerView) -> None:
    view.jetstream_view = js(accounts=("A", "B"), streams=held_streams())
    cases = {
        "account=Z": 'JetStream account "Z" not found',
        "account=A&stream=NOPE": 'JetStream stream "NOPE" not found on account "A"',
        "account=A&stream=ORDERS&consumer=NOPE": (
            'JetStream consumer "NOPE" not found for stream "ORDERS" on account "A"'
        ),
    }
    for query, text in cases.items():
        page = monitor.get("/healthz", query)
        assert (page.status, page.json) == (404, {"status": "unavailable", "error": text})
    detailed = monitor.get("/healthz", "account=A&stream=NOPE&details=true")
    assert detailed.status == 404
    assert detailed.json["errors"] == [
        {
            "type": "STREAM",
            "account": "A",
            "stream": "NOPE",
            "error": 'JetStream stream "NOPE" not found on account "A"',
        }
    ]


def test_single_server_checks_recovery_not_currency(monitor: MonitorProbe, view: FakeServerView) -> None:
    streams = (
        StreamHealth("A", "OK", consumers=(ConsumerHealth("C", "not_current", "ignored when single"),)),
        StreamHealth("A", "LOST", "not_recovered"),
        StreamHealth("A", "BROKEN", "write_error", "no space left on device"),
    )
    view.jetstream_view = js(clustered=False, accounts=("A",), streams=streams)
    page = monitor.get("/healthz")
    assert (page.status, page.json["error"]) == (503, "JetStream stream 'A > LOST' could not be recovered")
    errors = monitor.get("/healthz", "details=true").json["errors"]
    assert [e["error"] for e in errors] == [
        "JetStream stream 'A > LOST' could not be recovered",
        "JetStream stream 'A > BROKEN' write error: no space left on device",
    ]
    assert monitor.get("/healthz", "account=A&stream=OK").status == 200
    assert monitor.get("/healthz", "js-meta-only=true").status == 503  # meta-only means nothing when single


def test_bad_boolean_parameter(monitor: MonitorProbe) -> None:
    page = monitor.get("/healthz", "js-server-only=sure")
    assert page.status == 400
    assert page.text.startswith("Error decoding boolean for 'js-server-only'")
