"""STREAM.CREATE / STREAM.UPDATE request checking against the real nats-server 2.15.1: the same raw
requests to both servers, the same answers (error code, err_code and description; the created
config for a success). A table of nats-server's checks in its order (checkStreamCfg, the create
and update handlers, json.Decoder), and hostile bodies: deep nesting, huge numbers, bad UTF-8."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.config.options import ServerOptions
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

from .conftest import api, run_with

TIMEOUT_S = 5.0
Step = tuple[str, bytes]


def deep(levels: int) -> bytes:
    return b'{"name":"A","subjects":' + b"[" * levels + b"]" * levels + b"}"


def create(body: str | bytes, name: str = "A") -> Step:
    return f"$JS.API.STREAM.CREATE.{name}", body.encode() if isinstance(body, str) else body


def update(body: str, name: str = "A") -> Step:
    return f"$JS.API.STREAM.UPDATE.{name}", body.encode()


# Each case: the steps sent in order; every answer is compared. Streams made are deleted after.
CASES: dict[str, list[Step]] = {
    # the handler's own checks, before the config's
    "empty body": [create("")],
    "null body": [create("null")],
    "string body": [create('"str"')],
    "number body": [create("5")],
    "array body": [create("[1]")],
    "name mismatch": [create('{"name":"B"}')],
    "two values, the last names the stream": [create('{"name":"B"}{"name":"A"}')],
    "a bad second value": [create('{"name":"A","max_msgs":5}{"max_msgs":"x"}')],
    "sealed on create": [create('{"name":"A","sealed":true,"mirror_direct":true}')],
    "mirror_direct without a mirror": [create('{"name":"A","mirror_direct":true}')],
    # json.Decoder: syntax, depth, numbers, types, unknown fields
    "nesting 10,001 deep": [create(deep(10_001))],
    "nesting 10,000 deep": [create(deep(10_000))],
    "nesting 9,999 deep": [create(deep(9_999))],
    "an open array 10,001 deep": [create(b"[" * 10_001)],
    "unterminated object": [create('{"name":"A"')],
    "trailing comma": [create('{"name":"A",}')],
    "wrong closer": [create('{"name":"A"]')],
    "missing colon": [create('{"name":"A","no_ack" 1}')],
    "unquoted key": [create("{name:1}")],
    "array without comma": [create("[1 2]")],
    "garbage after the value": [create('{"name":"A"} x')],
    "literal typo": [create('{"name":"A","no_ack":trux}')],
    "NaN": [create('{"name":"A","max_msgs":NaN}')],
    "bare minus": [create('{"name":"A","max_msgs":-}')],
    "leading zero": [create('{"name":"A","max_msgs":01}')],
    "point without digits": [create('{"name":"A","max_msgs":1.}')],
    "control character in a string": [create(b'{"name":"A","description":"\x01"}')],
    "bad escape": [create(b'{"name":"A","description":"\\x"}')],
    "bad unicode escape": [create(b'{"name":"A","description":"\\u12G4"}')],
    "lone surrogate": [create(b'{"name":"A","description":"\\ud800"}')],
    "invalid UTF-8 in a string": [create(b'{"name":"A","description":"\xff"}')],
    "invalid UTF-8 outside strings": [create(b"\xff")],
    "max_msgs 2**70": [create('{"name":"A","max_msgs":1180591620717411303424}')],
    "max_msgs_per_subject 2**63": [create('{"name":"A","max_msgs_per_subject":9223372036854775808}')],
    "max_msg_size over int32": [create('{"name":"A","max_msg_size":2147483648}')],
    "fractional max_msgs": [create('{"name":"A","max_msgs":1.5}')],
    "exponent max_msgs": [create('{"name":"A","max_msgs":1e3}')],
    "negative first_seq": [create('{"name":"A","first_seq":-1}')],
    "string max_age": [create('{"name":"A","max_age":"x"}')],
    "number placement tags": [create('{"name":"A","placement":{"tags":[1,2]}}')],
    "number placement cluster": [create('{"name":"A","placement":{"cluster":1}}')],
    "number placement": [create('{"name":"A","placement":5}')],
    "unknown placement field": [create('{"name":"A","placement":{"foo":1}}')],
    "number metadata value": [create('{"name":"A","metadata":{"a":1}}')],
    "null metadata value": [create('{"name":"A","metadata":{"a":null}}')],
    "number source name": [create('{"name":"A","sources":[{"name":1}]}')],
    "number sources": [create('{"name":"A","sources":5}')],
    "number mirror transform src": [
        create('{"name":"A","mirror":{"name":"B","subject_transforms":[{"src":1}]}}')
    ],
    "string consumer_limits": [create('{"name":"A","consumer_limits":{"max_ack_pending":"x"}}')],
    "null retention": [create('{"name":"A","retention":null}')],
    "unknown retention": [create('{"name":"A","retention":"x"}')],
    "object retention": [create('{"name":"A","retention":{ "a" : 1 }}')],
    "upper-case discard": [create('{"name":"A","discard":"NEW"}')],
    "number compression": [create('{"name":"A","compression":5}')],
    "null compression": [create('{"name":"A","compression":null}')],
    "unknown persist_mode": [create('{"name":"A","persist_mode":"x"}')],
    "number source opt_start_time": [create('{"name":"A","sources":[{"name":"B","opt_start_time":5}]}')],
    "bad source opt_start_time": [create('{"name":"A","sources":[{"name":"B","opt_start_time":"x"}]}')],
    "first error wins: type": [create('{"name":"A","max_msgs":"x","retention":"x"}')],
    "first error wins: enum": [create('{"name":"A","retention":"x","max_msgs":"x"}')],
    "first error wins: unknown field": [create('{"name":"A","bogus":1,"max_msgs":"x"}')],
    "keys match case-insensitively": [create('{"NAME":"A","Max_Msgs":5}')],
    "a later key wins": [create('{"name":"A","max_msgs":1,"MAX_MSGS":"x"}')],
    # the account and server limits come before the config's checks (but not for replicas > 1)
    "max_bytes over the server's storage": [create('{"name":"A","max_bytes":9223372036854775807}')],
    "max_bytes over storage before a config error": [
        create('{"name":"A","storage":"file","max_bytes":9223372036854775807,"subjects":["a","a"]}')
    ],
    "max_bytes without a storage type, then a config error": [
        create('{"name":"A","max_bytes":9223372036854775807,"subjects":["a","a"]}')
    ],
    "replicas 3 with max_bytes over storage": [
        create('{"name":"A","num_replicas":3,"max_bytes":9223372036854775807}')
    ],
    # checkStreamCfg, in its order
    "negative replicas": [create('{"name":"A","num_replicas":-1}')],
    "too many replicas": [create('{"name":"A","num_replicas":2147483648}')],
    "negative limits become -1": [create('{"name":"A","max_msgs":-5,"max_consumers":-7,"max_bytes":-2}')],
    "pedantic negative limit": [create('{"name":"A","pedantic":true,"max_msgs":-5}')],
    "pedantic window from max_age": [create('{"name":"A","pedantic":true,"max_age":1000000000}')],
    "negative max_age": [create('{"name":"A","max_age":-1}')],
    "small max_age": [create('{"name":"A","max_age":10}')],
    "negative duplicate_window": [create('{"name":"A","duplicate_window":-1}')],
    "small duplicate_window": [create('{"name":"A","duplicate_window":10}')],
    "window over max_age": [create('{"name":"A","max_age":1000000000,"duplicate_window":2000000000}')],
    "rollup without purge": [create('{"name":"A","deny_purge":true,"allow_rollup_hdrs":true}')],
    "discard new per subject, discard old": [create('{"name":"A","discard_new_per_subject":true}')],
    "discard new per subject, no limit": [
        create('{"name":"A","discard":"new","discard_new_per_subject":true}')
    ],
    "mirror with subjects": [create('{"name":"A","subjects":["a"],"mirror":{"name":"B"}}')],
    "mirror with first_seq": [create('{"name":"A","first_seq":5,"mirror":{"name":"B"}}')],
    "mirror of itself": [create('{"name":"A","mirror":{"name":"A"}}')],
    "source of itself": [create('{"name":"A","sources":[{"name":"A"}]}')],
    "null source": [create('{"name":"A","sources":[null]}')],
    "duplicate sources": [create('{"name":"A","sources":[{"name":"B"},{"name":"B"}]}')],
    "sources in a cycle": [
        create('{"name":"B","subjects":["b"],"sources":[{"name":"A"}]}', "B"),
        create('{"name":"A","subjects":["a"],"sources":[{"name":"B"}]}'),
    ],
    "mirror of a source cycle": [
        create('{"name":"B","subjects":["b"],"sources":[{"name":"A"}]}', "B"),
        create('{"name":"A","mirror":{"name":"B"}}'),
    ],
    "mirror inherits direct gets": [
        create('{"name":"B","subjects":["b"],"allow_direct":true}', "B"),
        create('{"name":"A","mirror":{"name":"B"}}'),
    ],
    "invalid subject": [create('{"name":"A","subjects":["a b"]}')],
    "empty subject": [create('{"name":"A","subjects":[""]}')],
    "duplicate subjects": [create('{"name":"A","subjects":["a","a"]}')],
    "overlapping subjects": [create('{"name":"A","subjects":["a","a.>","a.*"]}')],
    "all subjects without no_ack": [create('{"name":"A","subjects":[">"]}')],
    "JetStream API subjects": [create('{"name":"A","subjects":["$JS.API.>"]}')],
    "JetStream wildcard subjects": [create('{"name":"A","subjects":["$JS.*.x"]}')],
    "JetStream event subjects": [create('{"name":"A","subjects":["$JS.EVENT.>"]}')],
    "NRG subjects": [create('{"name":"A","subjects":["$NRG.x"]}')],
    "system subjects": [create('{"name":"A","subjects":["$SYS.REQ.x"]}')],
    "system account subjects": [create('{"name":"A","subjects":["$SYS.ACCOUNT.>"]}')],
    "JetStream API subjects with no_ack, then delete": [
        create('{"name":"A","subjects":["$JS.API.>"],"no_ack":true}'),
        ("$JS.API.STREAM.DELETE.A", b""),
        ("$JS.API.STREAM.INFO.A", b""),
    ],
    "preferred placement": [create('{"name":"A","placement":{"preferred":"x"}}')],
    "empty placement": [create('{"name":"A","placement":{}}')],
    "bad stream transform": [create('{"name":"A","subject_transform":{"src":"a b","dest":"x"}}')],
    # STREAM.UPDATE
    "update: empty body": [create('{"name":"A"}'), update("")],
    "update: name mismatch": [create('{"name":"A"}'), update('{"name":"B"}')],
    "update: config error before not found": [update('{"name":"A","max_age":-1}')],
    "update: not found": [update('{"name":"A"}')],
    "update: storage": [create('{"name":"A"}'), update('{"name":"A","storage":"memory"}')],
    "update: to workqueue": [create('{"name":"A"}'), update('{"name":"A","retention":"workqueue"}')],
    "update: unseal": [
        create('{"name":"A"}'),
        update('{"name":"A","sealed":true}'),
        update('{"name":"A","sealed":false}'),
    ],
    "update: mirror_direct without a mirror": [
        create('{"name":"A"}'),
        update('{"name":"A","mirror_direct":true}'),
    ],
    "update: disable TTLs": [
        create('{"name":"A","allow_msg_ttl":true}'),
        update('{"name":"A","allow_msg_ttl":false}'),
    ],
}

MASKED_CONFIG_KEYS = ("metadata",)


def comparable(answer: dict[str, object]) -> object:
    """An answer with what differs between servers by design (times, versions) left out."""
    if "error" in answer:
        return {"error": answer["error"]}
    config = answer.get("config")
    if isinstance(config, dict):
        return {"config": {k: v for k, v in config.items() if k not in MASKED_CONFIG_KEYS}}
    return {k: v for k, v in answer.items() if k not in ("created", "ts", "state", "cluster")}


async def exchange(url: str, steps: list[Step]) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        answers: list[object] = []
        for subject, body in steps:
            msg = await nc.request(subject, body, timeout=TIMEOUT_S)
            answers.append(comparable(json.loads(msg.data)))
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"", timeout=TIMEOUT_S)).data)
        for name in names.get("streams") or []:
            await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=TIMEOUT_S)
        info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=TIMEOUT_S)).data)
        assert info["streams"] == 0, info  # the server still answers and every stream is gone
        return answers
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(nats-server URL, appliance URL), shared by the whole table (each case cleans up)."""
    base: Path = tmp_path_factory.mktemp("streamcfg")
    options = ServerOptions()
    options.server_name = "S1"
    with (
        NatsServer(["-js", "-sd", str(base / "ns"), "-n", "S1"]) as real,
        InProcessServer(options, jetstream_dir=str(base / "ours")) as ours,
    ):
        yield real.url, ours.url


@pytest.mark.parametrize("name", list(CASES))
def test_stream_config_answers_match_nats_server(both: tuple[str, str], name: str) -> None:
    real, ours = both
    steps = CASES[name]
    expected = asyncio.run(asyncio.wait_for(exchange(real, steps), 30))
    got = asyncio.run(asyncio.wait_for(exchange(ours, steps), 30))
    assert got == expected


def test_deleting_a_stream_that_captures_its_own_delete_request(
    js_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A no-ack stream on `$JS.API.>` stores the STREAM.DELETE request that deletes it: the
    publish queued for it is dropped with the stream, never appended to its removed files."""
    caplog.set_level(logging.ERROR)

    async def scenario(nc: Client, js: JetStreamContext) -> None:
        body = b'{"name":"A","subjects":["$JS.API.>"],"no_ack":true}'
        made = await api(nc, "$JS.API.STREAM.CREATE.A", body)
        assert "error" not in made
        deleted = await api(nc, "$JS.API.STREAM.DELETE.A")
        assert deleted == {"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": True}
        for _ in range(3):  # the loop turns that would have flushed the queued publish
            assert (await api(nc, "$JS.API.INFO"))["streams"] == 0

    run_with(js_server.url, scenario)
    failures = [r for r in caplog.records if r.exc_info or "Exception in callback" in r.getMessage()]
    assert failures == []


PULL_BODIES = {
    "nesting 10,001 deep": b'{"batch":' + b"[" * 10_001 + b"]" * 10_001 + b"}",
    "nesting 500 deep": b'{"batch":' + b"[" * 500 + b"]" * 500 + b"}",
    "string batch": b'{"batch":"x"}',
    "fractional batch": b'{"batch":1.5}',
    "unterminated": b'{"batch":1,',
    "garbage after the value": b'{"batch":1} x',
    "string expires": b'{"batch":1,"expires":"1s"}',
    "huge max_bytes": b'{"batch":1,"max_bytes":9223372036854775808}',
}


async def pull_answers(url: str) -> list[tuple[str, str]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.P", b'{"name":"P","subjects":["p"]}', timeout=TIMEOUT_S)
        durable = b'{"stream_name":"P","config":{"durable_name":"C","ack_policy":"explicit"}}'
        await nc.request("$JS.API.CONSUMER.CREATE.P.C", durable, timeout=TIMEOUT_S)
        answers = []
        for body in PULL_BODIES.values():
            msg = await nc.request("$JS.API.CONSUMER.MSG.NEXT.P.C", body, timeout=TIMEOUT_S)
            headers = msg.headers or {}
            answers.append((headers.get("Status", ""), headers.get("Description", "")))
        await nc.request("$JS.API.STREAM.DELETE.P", b"", timeout=TIMEOUT_S)
        return answers
    finally:
        await nc.close()


def test_pull_request_bodies_answer_as_nats_server(both: tuple[str, str]) -> None:
    """A pull request's JSON (json.Unmarshal in nats-server): deep nesting and wrong types get
    its 400 and text, never an exception on the worker."""
    real, ours = both
    expected = asyncio.run(asyncio.wait_for(pull_answers(real), 30))
    got = asyncio.run(asyncio.wait_for(pull_answers(ours), 30))
    assert dict(zip(PULL_BODIES, got, strict=True)) == dict(zip(PULL_BODIES, expected, strict=True))
