"""Streams through nats-py: CRUD, info, publish and PubAck, expectations, limits, errors."""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with


def test_create_info_list_delete(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        info = await js.add_stream(name="ORDERS", subjects=["orders.>"])
        assert info.config.subjects == ["orders.>"] and info.did_create
        again = await api(nc, "$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.>"]}')
        assert again["did_create"] is True and again["created"] == await _created(nc)
        conflict = await api(nc, "$JS.API.STREAM.CREATE.ORDERS", b'{"name":"ORDERS","subjects":["orders.x"]}')
        assert conflict["error"] == {
            "code": 400,
            "err_code": 10058,
            "description": "stream name already in use with a different configuration",
        }
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert names == {
            "type": "io.nats.jetstream.api.v1.stream_names_response",
            "total": 1,
            "offset": 0,
            "limit": 1024,
            "streams": ["ORDERS"],
        }
        listing = await api(nc, "$JS.API.STREAM.LIST", b'{"subject":"orders.new"}')
        assert listing["total"] == 1 and listing["streams"][0]["config"]["metadata"] == {
            "_nats.req.level": "0"
        }
        assert await js.delete_stream("ORDERS")
        with pytest.raises(NotFoundError):
            await js.stream_info("ORDERS")

    run_with(js_server.url, scenario)


async def _created(nc: Client) -> str:
    return str((await api(nc, "$JS.API.STREAM.INFO.ORDERS"))["created"])


def test_request_validation_uses_nats_server_codes(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        cases = [
            (
                "$JS.API.STREAM.CREATE.BAD",
                b'{"name":"OTHER"}',
                10056,
                "stream name in subject does not match request",
            ),
            (
                "$JS.API.STREAM.CREATE.X1",
                b'{"name":"X1","subjects":["orders.a"]}',
                10065,
                "subjects overlap with an existing stream",
            ),
            (
                "$JS.API.STREAM.CREATE.X2",
                b"{not json",
                10025,
                "invalid JSON: invalid character 'n' looking for beginning of object key string at offset 2",
            ),
            (
                "$JS.API.STREAM.CREATE.X3",
                b'{"name":"X3","bogus_field":1}',
                10025,
                'invalid JSON: json: unknown field "bogus_field"',
            ),
            (
                "$JS.API.STREAM.CREATE.R3",
                b'{"name":"R3","num_replicas":3}',
                10074,
                "replicas > 1 not supported in non-clustered mode",
            ),
            ("$JS.API.STREAM.INFO.NOPE", b"", 10059, "stream not found"),
            (
                "$JS.API.STREAM.UPDATE.ORDERS",
                b'{"name":"ORDERS","subjects":["orders.>"],"storage":"memory"}',
                10052,
                "stream configuration update can not change storage type",
            ),
            ("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", 10010, "JetStream clustering support required"),
            ("$JS.API.STREAM.MSG.GET.ORDERS", b'{"seq":99}', 10037, "no message found"),
            ("$JS.API.STREAM.MSG.DELETE.ORDERS", b'{"seq":99}', 10057, "stream store EOF"),  # file store, as nats-server
            ("$JS.API.CONSUMER.INFO.ORDERS.NOPE", b"", 10014, "consumer not found"),
        ]
        for subject, body, err_code, description in cases:
            response = await api(nc, subject, body)
            assert response["error"]["err_code"] == err_code, subject
            assert response["error"]["description"] == description, subject
        info_error = await api(nc, "$JS.API.STREAM.INFO.NOPE")
        assert list(info_error) == ["type", "error", "total", "offset", "limit"]

    run_with(js_server.url, scenario)


def test_unknown_api_subject_gets_no_reply(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        import nats.errors

        for subject in ("$JS.API.BOGUS", "$JS.API.STREAM.CREATE.A.B"):
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request(subject, b"{}", timeout=0.3)

    run_with(js_server.url, scenario)


def test_puback_dedupe_and_expectations(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        raw = await nc.request("orders.new", b"hello", timeout=5)
        assert raw.data == b'{"stream":"ORDERS","seq":1}'
        first = await nc.request("orders.new", b"x", headers={"Nats-Msg-Id": "abc"}, timeout=5)
        dup = await nc.request("orders.new", b"x", headers={"Nats-Msg-Id": "abc"}, timeout=5)
        assert first.data == b'{"stream":"ORDERS","seq":2}'
        assert dup.data == b'{"stream":"ORDERS","seq":2,"duplicate": true}'
        expectations = [
            ({"Nats-Expected-Stream": "OTHER"}, 10060, "expected stream does not match"),
            ({"Nats-Expected-Last-Sequence": "1"}, 10071, "wrong last sequence: 2"),
            ({"Nats-Expected-Last-Subject-Sequence": "1"}, 10071, "wrong last sequence: 2"),
            ({"Nats-Expected-Last-Msg-Id": "zzz"}, 10070, "wrong last msg ID: abc"),
            ({"Nats-Rollup": "sub"}, 10111, "rollup not permitted"),
        ]
        for headers, err_code, description in expectations:
            reply = json.loads((await nc.request("orders.new", b"y", headers=headers, timeout=5)).data)
            assert reply == {
                "error": {"code": reply["error"]["code"], "err_code": err_code, "description": description},
                "stream": "ORDERS",
                "seq": 0,
            }
        ok = await nc.request(
            "orders.new",
            b"z",
            headers={"Nats-Expected-Last-Msg-Id": "abc", "Nats-Expected-Last-Sequence": "2"},
            timeout=5,
        )
        assert json.loads(ok.data) == {"stream": "ORDERS", "seq": 3}

    run_with(js_server.url, scenario)


def test_limits_discard_new_and_permissions(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(
            nc,
            "$JS.API.STREAM.CREATE.LIM",
            b'{"name":"LIM","subjects":["lim.>"],"max_msgs":2,'
            b'"discard":"new","max_msg_size":10,"deny_delete":true,"deny_purge":true}',
        )
        replies = [
            json.loads((await nc.request("lim.a", data, timeout=5)).data)
            for data in (b"1", b"2", b"3", b"01234567890123")
        ]
        assert replies[:2] == [{"stream": "LIM", "seq": 1}, {"stream": "LIM", "seq": 2}]
        assert replies[2]["error"] == {
            "code": 503,
            "err_code": 10077,
            "description": "maximum messages exceeded",
        }
        assert replies[3]["error"] == {
            "code": 400,
            "err_code": 10054,
            "description": "message size exceeds maximum allowed",
        }
        deleted = await api(nc, "$JS.API.STREAM.MSG.DELETE.LIM", b'{"seq":1}')
        assert deleted["error"]["err_code"] == 10057
        purged = await api(nc, "$JS.API.STREAM.PURGE.LIM")
        assert list(purged) == ["type", "error", "purged"] and purged["error"]["err_code"] == 10110
        await api(
            nc,
            "$JS.API.STREAM.CREATE.PS",
            b'{"name":"PS","subjects":["ps.>"],"max_msgs_per_subject":1,'
            b'"discard":"new","discard_new_per_subject":true}',
        )
        await nc.request("ps.a", b"1", timeout=5)
        per_subject = json.loads((await nc.request("ps.a", b"2", timeout=5)).data)
        assert per_subject["error"]["description"] == "maximum messages per subject exceeded"
        created = json.loads(
            (
                await nc.request(
                    "ps.b", b"1", headers={"Nats-Expected-Last-Subject-Sequence": "0"}, timeout=5
                )
            ).data
        )
        assert created == {"stream": "PS", "seq": 2}

    run_with(js_server.url, scenario)


def test_purge_msg_get_delete_and_info_details(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="S", subjects=["s.>"])
        for index in range(6):
            await js.publish(f"s.{index % 2}", f"m{index}".encode())
        got = await api(nc, "$JS.API.STREAM.MSG.GET.S", b'{"last_by_subj":"s.0"}')
        assert got["message"]["seq"] == 5 and got["message"]["subject"] == "s.0"
        following = await api(nc, "$JS.API.STREAM.MSG.GET.S", b'{"next_by_subj":"s.1","seq":3}')
        assert following["message"]["seq"] == 4
        assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.S", b'{"seq":2}'))["success"] is True
        assert (await api(nc, "$JS.API.STREAM.MSG.DELETE.S", b'{"seq":3,"no_erase":true}'))["success"] is True
        info = await api(nc, "$JS.API.STREAM.INFO.S", b'{"deleted_details":true,"subjects_filter":">"}')
        assert info["state"]["deleted"] == [2, 3] and info["state"]["num_deleted"] == 2
        assert info["state"]["subjects"] == {"s.0": 2, "s.1": 2}
        assert (info["total"], info["limit"]) == (2, 100000)
        purged = await api(nc, "$JS.API.STREAM.PURGE.S", b'{"filter":"s.1","keep":1}')
        assert purged == {
            "type": "io.nats.jetstream.api.v1.stream_purge_response",
            "success": True,
            "purged": 1,
        }
        below = await api(nc, "$JS.API.STREAM.PURGE.S", b'{"seq":5}')
        assert below["purged"] == 1
        rest = await js.purge_stream("S")
        assert rest is True
        state = (await js.stream_info("S")).state
        assert state.messages == 0 and state.last_seq == 6 and state.first_seq == 7

    run_with(js_server.url, scenario)


def test_sealed_stream_and_rollup(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await api(nc, "$JS.API.STREAM.CREATE.R", b'{"name":"R","subjects":["r.>"],"allow_rollup_hdrs":true}')
        for index in range(3):
            await js.publish("r.a", str(index).encode())
        await js.publish("r.b", b"b")
        await js.publish("r.a", b"top", headers={"Nats-Rollup": "sub"})
        assert (await js.stream_info("R")).state.messages == 2
        bad = json.loads((await nc.request("r.a", b"", headers={"Nats-Rollup": "bad"}, timeout=5)).data)
        assert bad["error"] == {"code": 500, "err_code": 10111, "description": 'rollup value invalid: "bad"'}
        await js.publish("r.c", b"all", headers={"Nats-Rollup": "all"})
        assert (await js.stream_info("R")).state.messages == 1
        config = (await api(nc, "$JS.API.STREAM.INFO.R"))["config"]
        config["sealed"] = True
        config.pop("metadata")
        sealed = await api(nc, "$JS.API.STREAM.UPDATE.R", json.dumps(config).encode())
        assert sealed["config"]["sealed"] is True
        refused = json.loads((await nc.request("r.a", b"x", timeout=5)).data)
        assert refused["error"]["err_code"] == 10109
        with pytest.raises(BadRequestError):
            await js.purge_stream("R")

    run_with(js_server.url, scenario)


def test_account_info_counts(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="A", subjects=["a"])
        await js.publish("a", b"hello")
        info = await api(nc, "$JS.API.INFO")
        assert info["streams"] == 1 and info["storage"] > 0 and info["api"]["level"] == 5
        assert list(info) == [
            "type",
            "memory",
            "storage",
            "reserved_memory",
            "reserved_storage",
            "streams",
            "consumers",
            "limits",
            "api",
        ]

    run_with(js_server.url, scenario)


def test_jetstream_domain_prefix_and_puback(store_dir: str) -> None:
    from appliance.config.options import ServerOptions

    options = ServerOptions()
    options.jetstream.domain = "hub"

    async def scenario(nc: Client, _: JetStreamContext) -> None:
        js = nc.jetstream(domain="hub", timeout=5)
        await js.add_stream(name="DOM", subjects=["dom.>"])
        ack = await js.publish("dom.x", b"1")
        assert (ack.stream, ack.seq, ack.domain) == ("DOM", 1, "hub")
        sub = await js.pull_subscribe("dom.>", "C")
        assert [m.data for m in await sub.fetch(1, timeout=2)] == [b"1"]
        info = await api(nc, "$JS.hub.API.INFO")
        assert info["domain"] == "hub" and info["streams"] == 1

    with InProcessServer(options, jetstream_dir=store_dir) as server:
        run_with(server.url, scenario)


def test_a_stream_whose_store_cannot_open_is_a_create_error(
    js_server: InProcessServer, store_dir: str
) -> None:
    import os

    blocked = os.path.join(store_dir, "jetstream", "$G", "streams", "BLOCKED")
    os.makedirs(os.path.dirname(blocked), exist_ok=True)
    with open(blocked, "w") as handle:  # a file where the stream's directory must go
        handle.write("in the way")

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        failed = await api(nc, "$JS.API.STREAM.CREATE.BLOCKED", b'{"name":"BLOCKED"}')
        assert failed["error"]["err_code"] == 10049
        await js.add_stream(name="FINE", subjects=["fine"])  # the meta group is still healthy
        assert (await js.publish("fine", b"x")).seq == 1

    run_with(js_server.url, scenario)


def test_durable_unless_a_sync_interval_is_configured() -> None:
    from appliance.config.options import ServerOptions
    from appliance.jetstream.service import durable_by_default

    options = ServerOptions()
    assert durable_by_default(options)
    options.jetstream.sync_interval_s = 1.0
    assert not durable_by_default(options)
    options.jetstream.sync_always = True
    assert durable_by_default(options)


def test_an_account_without_jetstream_is_told_so(store_dir: str) -> None:
    from appliance.config.options import Account, ServerOptions, User

    options = ServerOptions()
    options.accounts = {
        "APP": Account("APP", users=[User("app", "secret", "APP")]),
        "JS": Account("JS", users=[User("js", "secret", "JS")]),
    }
    options.accounts["JS"].jetstream.enabled = True

    async def without(nc: Client, js: JetStreamContext) -> None:
        info = await api(nc, "$JS.API.INFO")
        assert info == {
            "type": "io.nats.jetstream.api.v1.account_info_response",
            "error": {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"},
        }

    async def with_js(nc: Client, js: JetStreamContext) -> None:
        assert (await api(nc, "$JS.API.INFO"))["streams"] == 0

    with InProcessServer(options, jetstream_dir=store_dir) as server:
        run_with(server.url.replace("nats://", "nats://app:secret@"), without)
        run_with(server.url.replace("nats://", "nats://js:secret@"), with_js)


def test_update_moves_subjects_and_expected_subject_of_another_subject(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="U", subjects=["u.a"])
        await js.publish("u.a", b"1")
        await js.update_stream(name="U", subjects=["u.a", "u.b"])
        assert (await js.publish("u.b", b"2")).seq == 2
        checked = json.loads(
            (
                await nc.request(
                    "u.b",
                    b"3",
                    headers={
                        "Nats-Expected-Last-Subject-Sequence": "1",
                        "Nats-Expected-Last-Subject-Sequence-Subject": "u.a",
                    },
                    timeout=5,
                )
            ).data
        )
        assert checked == {"stream": "U", "seq": 3}
        await js.update_stream(name="U", subjects=["u.b"])
        import nats.errors

        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("u.a", b"gone", timeout=2)

    run_with(js_server.url, scenario)


def test_first_seq_and_unsupported_features_are_refused_not_ignored(js_server: InProcessServer) -> None:
    async def scenario(nc: Client, js: JetStreamContext) -> None:
        created = await api(nc, "$JS.API.STREAM.CREATE.F", b'{"name":"F","first_seq":100}')
        assert created["config"]["first_seq"] == 100
        assert json.loads((await nc.request("F", b"x", timeout=5)).data) == {"stream": "F", "seq": 100}
        for field in ('"subject_delete_marker_ttl":1000000000',):  # republish: test_republish*.py
            refused = await api(nc, "$JS.API.STREAM.CREATE.T", b'{"name":"T",' + field.encode() + b"}")
            assert refused["error"]["err_code"] == 10052

    run_with(js_server.url, scenario)
