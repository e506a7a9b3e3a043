"""JetStream API bodies and replies as the bench reads and writes them."""

import json

import pytest

from appliance.bench import jsapi
from appliance.errors import ProtocolError


def test_pub_acks() -> None:
    assert jsapi.parse_pub_ack(b'{"stream":"ORDERS","seq":1}') == jsapi.PubAck("ORDERS", 1)
    assert jsapi.parse_pub_ack(b'{"stream":"ORDERS","seq":4,"duplicate": true}') == jsapi.PubAck("ORDERS", 4, True)
    assert jsapi.parse_pub_ack(b'{"stream":"X","domain":"D","seq":7}') == jsapi.PubAck("X", 7)


def test_an_error_ack_raises_with_its_codes() -> None:
    ack = (b'{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},'
           b'"stream":"ORDERS","seq":0}')
    with pytest.raises(jsapi.ApiError) as caught:
        jsapi.parse_pub_ack(ack)
    assert (caught.value.code, caught.value.err_code) == (400, 10060)
    assert caught.value.description == "expected stream does not match"


@pytest.mark.parametrize("payload", [b"", b"nope", b"[1]", b'{"stream":"S"}', b'{"seq":1}', b'{"stream":"S","seq":true}'])
def test_a_malformed_ack_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        jsapi.parse_pub_ack(payload)


def test_api_responses() -> None:
    ok = jsapi.check_response(b'{"type":"io.nats.jetstream.api.v1.stream_delete_response","success":true}')
    assert ok["success"] is True
    with pytest.raises(jsapi.ApiError) as caught:
        jsapi.check_response(b'{"type":"x","error":{"code":404,"err_code":10059,"description":"stream not found"}}')
    assert caught.value.err_code == jsapi.ERR_STREAM_NOT_FOUND


def test_request_bodies_use_only_fields_the_strict_server_knows() -> None:
    assert jsapi.stream_config("S", ["a.>"], storage="memory", replicas=3) == {
        "name": "S", "subjects": ["a.>"], "storage": "memory", "num_replicas": 3}
    kv = jsapi.kv_stream_config("B", storage="file", replicas=1)
    assert (kv["name"], kv["subjects"], kv["max_msgs_per_subject"], kv["allow_direct"]) == ("KV_B", ["$KV.B.>"], 1, True)
    assert jsapi.consumer_config("C", ack="none", deliver_subject="d", max_ack_pending=9) == {
        "durable_name": "C", "deliver_policy": "all", "ack_policy": "none", "deliver_subject": "d"}
    assert jsapi.consumer_config("C", ack="explicit", max_ack_pending=9)["max_ack_pending"] == 9
    assert json.loads(jsapi.pull_request(500, expires_ns=5_000_000_000)) == {"batch": 500, "expires": 5_000_000_000}
