"""The endpoints as `$SYS.REQ.SERVER...` requests: option decoding, filtering, reply envelope, errors."""

import json
from typing import Any

import pytest

from appliance.config.options import JetStreamOptions
from appliance.server.monitor import MonitorApp
from appliance.server.monitor.system import system_subjects
from appliance.server.monitor.view import JetStreamView, MetaClusterInfo, SubscriptionInfo
from appliance.testing.fake_view import FakeServerView


def ask(view: FakeServerView, name: str, body: bytes = b"", seq: int = 7) -> Any:
    reply = MonitorApp(view).system_reply(name, body, seq=seq)
    assert reply is not None, "filtered out"
    assert b"\n" not in reply, "system replies are compact JSON"
    return json.loads(reply)


@pytest.fixture
def scene(view: FakeServerView) -> FakeServerView:
    view.server_name = "S1"
    view.account_names.append("APP")
    subs = (SubscriptionInfo("foo.>", "1", 7, "APP"), SubscriptionInfo("bar", "2", 7, "APP", queue="q"))
    view.connect(7, name="holder", account="APP", authorized_user="a", subscriptions=subs)
    view.connect(8, name="other")
    return view


def test_the_envelope_names_the_server(scene: FakeServerView) -> None:
    reply = ask(scene, "VARZ", seq=15)
    assert list(reply) == ["server", "data"]
    server = reply["server"]
    assert list(server) == ["name", "host", "id", "ver", "jetstream", "flags", "seq", "time"]
    assert (server["name"], server["id"], server["seq"], server["jetstream"], server["flags"]) == (
        "S1", scene.server_id, 15, False, 0,
    )  # fmt: skip
    assert reply["data"]["server_name"] == "S1"


def test_jetstream_sets_the_capability_flag(scene: FakeServerView) -> None:
    scene.options.jetstream = JetStreamOptions(enabled=True, domain="hub")
    scene.jetstream_view = JetStreamView(
        enabled=True,
        clustered=False,
        max_memory=1,
        max_storage=1,
        store_dir="/x",
        sync_interval_s=120,
        domain="hub",
    )
    server = ask(scene, "VARZ")["server"]
    assert (server["domain"], server["jetstream"], server["flags"]) == ("hub", True, 1)


def test_connz_options_use_go_field_names(scene: FakeServerView) -> None:
    data = ask(scene, "CONNZ", b'{"subscriptions":true,"acc":"APP","auth":true}')["data"]
    (conn,) = data["connections"]
    assert (conn["cid"], conn["account"], conn["authorized_user"]) == (7, "APP", "a")
    assert conn["subscriptions_list"] == ["foo.>", "bar"]
    detail = ask(scene, "CONNZ", b'{"subscriptions_detail":true,"cid":7}')["data"]["connections"][0]
    assert detail["subscriptions_list_detail"][1]["qgroup"] == "q"


def test_go_matches_option_names_without_case(scene: FakeServerView) -> None:
    data = ask(scene, "CONNZ", b'{"LIMIT":1,"Offset":1}')["data"]
    assert (data["limit"], data["offset"], [c["cid"] for c in data["connections"]]) == (1, 1, [8])


def test_state_is_a_number(scene: FakeServerView) -> None:
    scene.close(8)
    assert [c["cid"] for c in ask(scene, "CONNZ", b'{"state":1}')["data"]["connections"]] == [8]
    assert [c["cid"] for c in ask(scene, "CONNZ", b'{"state":2}')["data"]["connections"]] == [7, 8]
    nothing = ask(scene, "CONNZ", b'{"state":7}')["data"]
    assert (nothing["total"], nothing["connections"]) == (0, [])


def test_filter_subject_needs_an_account(scene: FakeServerView) -> None:
    refused = ask(scene, "CONNZ", b'{"filter_subject":"foo.x"}')
    assert refused["data"] is None
    assert refused["error"] == {
        "code": 500,
        "description": "filter by subject only valid with account filtering",
    }
    found = ask(scene, "CONNZ", b'{"filter_subject":"foo.x","acc":"APP"}')["data"]["connections"]
    assert [c["cid"] for c in found] == [7]
    assert ask(scene, "CONNZ", b'{"filter_subject":"baz","acc":"APP"}')["data"]["connections"] == []


def test_endpoint_refusals_are_500_with_null_data(scene: FakeServerView) -> None:
    reply = ask(scene, "CONNZ", b'{"sort":"bogus"}')
    assert list(reply) == ["server", "data", "error"]
    assert (reply["data"], reply["error"]) == (
        None,
        {"code": 500, "description": "invalid sorting option: bogus"},
    )


GO_TYPE_ERRORS = [  # as a live nats-server 2.15.1 words them
    ("CONNZ", b'{"auth":"x"}', "string", "ConnzEventOptions.auth", "bool"),
    ("CONNZ", b'{"limit":1.5}', "number 1.5", "ConnzEventOptions.limit", "int"),
    ("CONNZ", b'{"cid":-1}', "number -1", "ConnzEventOptions.cid", "uint64"),
    ("CONNZ", b'{"tags":"x"}', "string", "ConnzEventOptions.tags", "[]string"),
    ("SUBSZ", b'{"offset":"1"}', "string", "SubszEventOptions.offset", "int"),
    ("HEALTHZ", b'{"details":1}', "number", "HealthzEventOptions.details", "bool"),
]


@pytest.mark.parametrize(("name", "body", "what", "field", "go_type"), GO_TYPE_ERRORS)
def test_mistyped_options_are_400_with_go_text(
    scene: FakeServerView, name: str, body: bytes, what: str, field: str, go_type: str
) -> None:
    reply = ask(scene, name, body)
    assert list(reply) == ["server", "error"]
    description = f"json: cannot unmarshal {what} into Go struct field {field} of type {go_type}"
    assert reply["error"] == {"code": 400, "description": description}


def test_a_body_that_is_not_an_object_is_400(scene: FakeServerView) -> None:
    assert ask(scene, "CONNZ", b"[]")["error"] == {
        "code": 400,
        "description": "json: cannot unmarshal array into Go value of type server.ConnzEventOptions",
    }
    nan = ask(scene, "CONNZ", b'{"limit":NaN}')["error"]
    assert nan == {"code": 400, "description": "invalid character 'N' looking for beginning of value"}


def test_syntax_errors_are_400(scene: FakeServerView) -> None:
    reply = ask(scene, "CONNZ", b"not json")
    assert reply["error"]["code"] == 400


def test_null_options_and_empty_bodies_mean_defaults(scene: FakeServerView) -> None:
    assert ask(scene, "CONNZ", b"null")["data"]["limit"] == 1024
    assert ask(scene, "CONNZ", b'{"auth":null}')["data"]["num_connections"] == 2
    assert ask(scene, "CONNZ", b"  ")["data"]["num_connections"] == 2


def test_subsz_and_healthz(scene: FakeServerView) -> None:
    subsz = ask(scene, "SUBSZ", b'{"subscriptions":true,"account":"APP","test":"foo.a"}')["data"]
    assert [s["subject"] for s in subsz["subscriptions_list"]] == ["foo.>"]
    assert ask(scene, "HEALTHZ")["data"] == {"status": "ok", "status_code": 200}
    assert ask(scene, "HEALTHZ", b'{"stream":"S"}')["data"] == {
        "status": "error",
        "status_code": 400,
        "error": '"account" must not be empty when checking stream health',
    }


@pytest.mark.parametrize(
    ("body", "answers"),
    [
        (b'{"server_name":"S"}', True),
        (b'{"server_name":"S","exact_match":true}', False),
        (b'{"server_name":"S1","exact_match":true}', True),
        (b'{"server_name":"nope"}', False),
        (b'{"host":"127.0"}', True),
        (b'{"cluster":"C"}', False),
        (b'{"tags":["az:1"]}', True),
        (b'{"tags":["az:1","ssd"]}', False),
        (b'{"domain":"hub"}', False),
    ],
)
def test_filters_decide_whether_this_server_answers(
    scene: FakeServerView, body: bytes, answers: bool
) -> None:
    scene.options.server_tags = ["az:1"]
    assert (MonitorApp(scene).system_reply("VARZ", body, seq=1) is not None) is answers


def test_varz_over_nats_shares_the_http_request_counts(scene: FakeServerView) -> None:
    app = MonitorApp(scene)
    app.respond("/connz", "")
    reply = app.system_reply("VARZ", b"", seq=1)
    assert reply is not None
    assert json.loads(reply)["data"]["http_req_stats"] == {"/connz": 1}


def test_subjects_to_subscribe() -> None:
    subjects = dict(system_subjects("NABC"))
    assert subjects["$SYS.REQ.SERVER.PING.CONNZ"] == "CONNZ"
    assert subjects["$SYS.REQ.SERVER.NABC.HEALTHZ"] == "HEALTHZ"
    assert subjects["$SYS.REQ.SERVER.PING"] == "STATSZ"  # plain PING: the statsz answer `server ls` lists
    assert subjects["$SYS.REQ.SERVER.PING.ROUTEZ"] == "ROUTEZ"
    assert subjects["$SYS.REQ.SERVER.PING.RAFTZ"] == subjects["$SYS.REQ.SERVER.NABC.RAFTZ"] == "RAFTZ"
    assert subjects["$SYS.REQ.SERVER.PING.JSZ"] == subjects["$SYS.REQ.SERVER.NABC.JSZ"] == "JSZ"
    assert len(subjects) == 17


def _js(meta: MetaClusterInfo | None) -> JetStreamView:
    return JetStreamView(enabled=True, clustered=meta is not None, max_memory=1, max_storage=1,
                         store_dir="/x", sync_interval_s=120, meta=meta)


def test_jsz_leader_only_is_answered_by_the_meta_leader_alone(scene: FakeServerView) -> None:
    body = b'{"leader_only":true}'
    app = MonitorApp(scene)
    assert app.system_reply("JSZ", body, seq=1) is None  # no JetStream: silent, as nats-server
    scene.jetstream_view = _js(None)  # standalone: it leads
    assert app.system_reply("JSZ", body, seq=1) is not None
    scene.jetstream_view = _js(MetaClusterInfo(name="C1", cluster_size=3, quorum_needed=2, leader="n2-c1"))
    assert app.system_reply("JSZ", body, seq=1) is None
    assert app.system_reply("JSZ", b"{}", seq=1) is not None  # every server answers without the flag
    scene.jetstream_view = _js(MetaClusterInfo(name="C1", cluster_size=3, quorum_needed=2, leader="S1"))
    assert ask(scene, "JSZ", body)["server"]["name"] == "S1"


def test_http_jsz_leader_only_refuses_on_servers_not_leading(scene: FakeServerView) -> None:
    app = MonitorApp(scene)
    refused = app.respond("/jsz", "leader-only=true")
    assert (refused.status, refused.body) == (400, b"filtered response: not leader")  # no JetStream
    scene.jetstream_view = _js(MetaClusterInfo(name="C1", cluster_size=3, quorum_needed=2, leader="n2-c1"))
    assert app.respond("/jsz", "leader-only=true").status == 400
    assert app.respond("/jsz", "leader-only=false").status == 200
    scene.jetstream_view = _js(None)
    assert app.respond("/jsz", "leader-only=true").status == 200
