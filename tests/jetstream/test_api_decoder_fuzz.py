"""Property test of the JetStream API decoder against the real nats-server 2.15.1: generated
STREAM.CREATE and CONSUMER.CREATE bodies (random JSON shapes and types in the known fields,
unknown and case-changed keys, plausible values near the limits) go to both servers; the answers
must be the same error (code, err_code, description) or both a success with the same config.

Bounded for `make test`: derandomized (the same examples every run) and a small example count.
Unsupported features (refused by design with 10052) are left out of the generated configs.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from appliance.config.options import ServerOptions
from appliance.testing.inproc import InProcessServer
from appliance.testing.natsserver import NatsServer

TIMEOUT_S = 5.0
EXAMPLES = int(os.environ.get("APPLIANCE_FUZZ_EXAMPLES", "120"))  # more for a deeper run by hand
DERANDOMIZE = "APPLIANCE_FUZZ_SEED" not in os.environ  # set it for fresh examples

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from(["", "x", "a.b", "1s", "limits", "file", "new", "none", "s2", "\u00e9", "a b"])
)
any_json = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "name", "src"]), inner, max_size=2),
    max_leaves=5,
)
big_ints = st.sampled_from([0, -1, -2, 1, 10, 100_000_000, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64])
durations = st.sampled_from([0, -1, 10, 100_000_000, 1_000_000_000, 120_000_000_000, 2**63 - 1])
subjects = st.lists(st.sampled_from(["a", "a.>", "a.*", "b", ">", "$JS.API.x", "$SYS.REQ.x", "a b", "", "F"]),
                    max_size=3)
names = st.sampled_from(["F", "G", "bad.name", "", "has space"])
transform = st.fixed_dictionaries(
    {},
    optional={
        "src": st.sampled_from(["a.*", "", "a b"]),
        "dest": st.sampled_from(["x.{{wildcard(1)}}", "", "x.$1", "y"]),
    },
)
DAMAGE_BYTES = b'\x00\x01\t\n "\\{}[]:,.-+0eE1tfnxz\x7f\xc3\xff'
source = st.fixed_dictionaries(
    {"name": names},
    optional={
        "filter_subject": st.sampled_from(["a", "", "a b"]),
        "opt_start_seq": big_ints,
        "opt_start_time": st.sampled_from(["2020-01-01T00:00:00Z", "x", 5]),
        "subject_transforms": st.lists(transform, max_size=2),
    },
)
plausible = {
    "description": st.text(max_size=5),
    "subjects": subjects,
    "retention": st.sampled_from(["limits", "interest", "workqueue", "x", "LIMITS"]),
    "max_consumers": big_ints,
    "max_msgs": big_ints,
    "max_bytes": big_ints,
    "max_age": durations,
    "max_msgs_per_subject": big_ints,
    "max_msg_size": big_ints,
    "discard": st.sampled_from(["old", "new", "NEW", "x"]),
    "storage": st.sampled_from(["file", "memory", "x"]),
    "num_replicas": st.sampled_from([0, 1, 3, -1, 6]),
    "no_ack": st.booleans(),
    "duplicate_window": durations,
    "placement": st.fixed_dictionaries({}, optional={"cluster": st.sampled_from(["", "c"]),
                                                     "tags": st.lists(st.sampled_from(["t", 1]), max_size=2),
                                                     "preferred": st.sampled_from(["", "p"])}),
    "mirror": source,
    "sources": st.lists(source, max_size=2),
    "compression": st.sampled_from(["none", "s2", "x"]),
    "first_seq": big_ints,
    "subject_transform": transform,
    "allow_direct": st.booleans(),
    "mirror_direct": st.booleans(),
    "discard_new_per_subject": st.booleans(),
    "sealed": st.booleans(),
    "deny_delete": st.booleans(),
    "deny_purge": st.booleans(),
    "allow_rollup_hdrs": st.booleans(),
    "consumer_limits": st.fixed_dictionaries({}, optional={"max_ack_pending": big_ints,
                                                          "inactive_threshold": durations}),
    "allow_msg_ttl": st.booleans(),
    "metadata": st.dictionaries(st.sampled_from(["k", "_nats.x"]), st.sampled_from(["v", ""]), max_size=2),
    "pedantic": st.booleans(),
}


@st.composite
def stream_bodies(draw: st.DrawFn) -> bytes:
    """A STREAM.CREATE.F body: name F (mostly), some known fields with plausible or random
    values, sometimes an unknown or case-changed key, sometimes not an object at all."""
    if draw(st.integers(0, 19)) == 0:
        return json.dumps(draw(any_json)).encode()
    config: dict[str, object] = {}
    if draw(st.integers(0, 9)):
        config["name"] = "F" if draw(st.integers(0, 9)) else draw(names)
    for key in draw(st.lists(st.sampled_from(sorted(plausible)), max_size=5, unique=True)):
        config[key] = draw(plausible[key]) if draw(st.integers(0, 4)) else draw(any_json)
    if draw(st.integers(0, 9)) == 0:
        key = draw(st.sampled_from(["bogus", "MAX_MSGS", "Subjects", "name "]))
        config[key] = draw(any_json)
    body = json.dumps(config).encode()
    damage = draw(st.integers(0, 11))
    if damage == 0:  # cut short
        body = body[: draw(st.integers(0, max(len(body) - 1, 0)))]
    elif damage == 1:  # one byte replaced (syntax errors and their offsets)
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.sampled_from(DAMAGE_BYTES))]) + body[at + 1 :]
    elif damage == 2:  # nested deep somewhere
        levels = draw(st.sampled_from([1, 50, 999, 1001, 9_999, 10_000, 10_001]))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        closer = b"]" if opener == b"[" else b"}"
        tail = draw(st.sampled_from([closer * levels, b""]))
        body = body[:-1] + (b', "x":' if len(body) > 2 else b'"x":') + opener * levels + tail + b"}"
    return body


def comparable(answer: dict[str, object]) -> object:
    if "error" in answer:
        return {"error": answer["error"]}
    config = dict(answer.get("config") or {})  # type: ignore[call-overload]
    config.pop("metadata", None)
    return {"config": config}


async def connect(url: str) -> Client:
    return await nats.connect(url, allow_reconnect=False)


async def create_and_clean(nc: Client, body: bytes) -> object:
    msg = await nc.request("$JS.API.STREAM.CREATE.F", body, timeout=TIMEOUT_S)
    answer = comparable(json.loads(msg.data))
    names_reply = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"", timeout=TIMEOUT_S)).data)
    for name in names_reply.get("streams") or []:
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=TIMEOUT_S)
    return answer


@pytest.fixture(scope="module")
def connections(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[asyncio.AbstractEventLoop, Client, Client]]:
    base: Path = tmp_path_factory.mktemp("fuzz")
    options = ServerOptions()
    options.server_name = "S1"
    loop = asyncio.new_event_loop()
    with (
        NatsServer(["-js", "-sd", str(base / "ns"), "-n", "S1"]) as real,
        InProcessServer(options, jetstream_dir=str(base / "ours")) as ours,
    ):
        theirs_nc = loop.run_until_complete(connect(real.url))
        ours_nc = loop.run_until_complete(connect(ours.url))
        try:
            yield loop, theirs_nc, ours_nc
        finally:
            loop.run_until_complete(theirs_nc.close())
            loop.run_until_complete(ours_nc.close())
            loop.close()


def test_stream_create_bodies_answer_as_nats_server(
    connections: tuple[asyncio.AbstractEventLoop, Client, Client],
) -> None:
    loop, theirs, ours = connections

    @settings(
        max_examples=EXAMPLES,
        derandomize=DERANDOMIZE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=stream_bodies())
    def same_answer(body: bytes) -> None:
        expected = loop.run_until_complete(create_and_clean(theirs, body))
        got = loop.run_until_complete(create_and_clean(ours, body))
        assert got == expected, body

    same_answer()


consumer_fields = {
    "durable_name": st.sampled_from(["C", "", "a.b"]),
    "name": st.sampled_from(["C", "D"]),
    "deliver_policy": st.sampled_from(["all", "last", "new", "undefined", "x", "by_start_sequence"]),
    "opt_start_seq": big_ints,
    "opt_start_time": st.sampled_from(["2020-01-01T00:00:00Z", "x", 5]),
    "ack_policy": st.sampled_from(["none", "all", "explicit", "x"]),
    "ack_wait": durations,
    "max_deliver": big_ints,
    "backoff": st.lists(durations, max_size=2),
    "filter_subject": st.sampled_from(["s", "a b", ""]),
    "filter_subjects": st.lists(st.sampled_from(["s", "s.>", ""]), max_size=2),
    "replay_policy": st.sampled_from(["instant", "original", "x"]),
    "rate_limit_bps": big_ints,
    "max_waiting": big_ints,
    "max_ack_pending": big_ints,
    "max_expires": durations,
    "idle_heartbeat": durations,
    "num_replicas": st.sampled_from([0, 1, 3, -1]),
    "metadata": st.dictionaries(st.sampled_from(["k"]), st.sampled_from(["v", ""]), max_size=1),
    "priority_policy": st.sampled_from(["none", "overflow", "x", 5]),
    "priority_groups": st.lists(st.sampled_from(["g", ""]), max_size=2),
    "priority_timeout": durations,
    "pause_until": st.sampled_from(["2020-01-01T00:00:00Z", "x"]),
}


@st.composite
def consumer_bodies(draw: st.DrawFn) -> bytes:
    config: dict[str, object] = {}
    for key in draw(st.lists(st.sampled_from(sorted(consumer_fields)), max_size=4, unique=True)):
        config[key] = draw(consumer_fields[key]) if draw(st.integers(0, 3)) else draw(any_json)
    if draw(st.integers(0, 9)) == 0:
        config[draw(st.sampled_from(["bogus", "ACK_POLICY"]))] = draw(any_json)
    return json.dumps({"stream_name": "S", "config": config}).encode()


async def consumer_create(nc: Client, body: bytes) -> dict[str, object]:
    msg = await nc.request("$JS.API.CONSUMER.CREATE.S", body, timeout=TIMEOUT_S)
    answer = json.loads(msg.data)
    names = json.loads((await nc.request("$JS.API.CONSUMER.NAMES.S", b"", timeout=TIMEOUT_S)).data)
    for name in names.get("consumers") or []:
        await nc.request(f"$JS.API.CONSUMER.DELETE.S.{name}", b"", timeout=TIMEOUT_S)
    return answer.get("error") or {}


def test_consumer_create_bodies_answer_as_nats_server(
    connections: tuple[asyncio.AbstractEventLoop, Client, Client],
) -> None:
    """CONSUMER.CREATE: the same error (code, err_code, description) from both servers for every
    body, or both a success: the decoder's answers and the consumer checks in nats-server's
    order and texts."""
    loop, theirs, ours = connections
    stream = b'{"name":"S","subjects":["s.>","s"]}'
    for nc in (theirs, ours):
        loop.run_until_complete(nc.request("$JS.API.STREAM.CREATE.S", stream, timeout=TIMEOUT_S))

    @settings(
        max_examples=EXAMPLES,
        derandomize=DERANDOMIZE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=consumer_bodies())
    def same_decoding(body: bytes) -> None:
        expected = loop.run_until_complete(consumer_create(theirs, body))
        got = loop.run_until_complete(consumer_create(ours, body))
        assert got == expected, body

    try:
        same_decoding()
    finally:
        for nc in (theirs, ours):
            loop.run_until_complete(nc.request("$JS.API.STREAM.DELETE.S", b"", timeout=TIMEOUT_S))


CONSUMER_CHECK_CASES = [  # each found by a deep run of the property test above, or its neighbour
    {"ack_wait": -1},
    {"backoff": [-1]},
    {"backoff": [1_000_000_000, -1], "ack_wait": -5},
    {"ack_wait": -1, "backoff": [1_000_000_000]},
    {"max_waiting": -1},
    {"max_batch": -1},
    {"max_expires": -1, "max_bytes": -1, "inactive_threshold": -1},
    {"ack_policy": "none", "max_ack_pending": 10},
    {"ack_policy": "none", "max_ack_pending": 10, "deliver_subject": "d"},
    {"ack_policy": "explicit", "max_ack_pending": -5},
    {"filter_subjects": [""], "priority_groups": ["g"]},
    {"filter_subject": "a b", "opt_start_seq": 5},
    {"filter_subject": "a b", "durable_name": "C", "name": "D"},
    {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z", "opt_start_seq": 3},
    {"max_deliver": -5, "backoff": [1_000_000_000, 2_000_000_000]},
    {"max_deliver": 1, "backoff": [1_000_000_000, 2_000_000_000]},
    {"max_deliver": 2, "backoff": [1_000_000_000, 2_000_000_000]},
    {"deliver_subject": "a.*", "max_waiting": 3},
    {"idle_heartbeat": 5, "rate_limit_bps": 5},
    {"name": "a.b", "ack_policy": "none"},
    {"name": "a b", "ack_wait": -1, "num_replicas": -1},
]


def test_consumer_checks_answer_as_nats_server(
    connections: tuple[asyncio.AbstractEventLoop, Client, Client],
) -> None:
    loop, theirs, ours = connections
    stream = b'{"name":"S","subjects":["s.>","s"]}'
    for nc in (theirs, ours):
        loop.run_until_complete(nc.request("$JS.API.STREAM.CREATE.S", stream, timeout=TIMEOUT_S))
    try:
        for config in CONSUMER_CHECK_CASES:
            body = json.dumps({"stream_name": "S", "config": config}).encode()
            expected = loop.run_until_complete(consumer_create(theirs, body))
            got = loop.run_until_complete(consumer_create(ours, body))
            assert got == expected, config
    finally:
        for nc in (theirs, ours):
            loop.run_until_complete(nc.request("$JS.API.STREAM.DELETE.S", b"", timeout=TIMEOUT_S))


DEFAULTED_CONFIGS = [  # accepted configs whose values nats-server's defaults rewrite
    {"durable_name": "C", "ack_policy": "none", "backoff": [1_000_000_000, 2_000_000_000]},
    {"durable_name": "C", "max_waiting": -1, "max_batch": -1, "max_expires": -5, "max_bytes": -1},
    {"durable_name": "C", "ack_policy": "none", "max_ack_pending": 10},
    {"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": -5, "max_deliver": -7},
    {"durable_name": "C", "ack_policy": "explicit", "inactive_threshold": -1, "idle_heartbeat": -1},
    {"durable_name": "C", "ack_policy": "all", "backoff": [1_000_000_000], "ack_wait": 5},
]


async def created_config(nc: Client, config: dict[str, object]) -> object:
    body = json.dumps({"stream_name": "S", "config": config}).encode()
    answer = json.loads((await nc.request("$JS.API.CONSUMER.CREATE.S.C", body, timeout=TIMEOUT_S)).data)
    await nc.request("$JS.API.CONSUMER.DELETE.S.C", b"", timeout=TIMEOUT_S)
    created = answer.get("config", answer.get("error"))
    if isinstance(created, dict):
        created.pop("metadata", None)
    return created


def test_consumer_defaults_echo_as_nats_server(
    connections: tuple[asyncio.AbstractEventLoop, Client, Client],
) -> None:
    loop, theirs, ours = connections
    stream = b'{"name":"S","subjects":["s"]}'
    for nc in (theirs, ours):
        loop.run_until_complete(nc.request("$JS.API.STREAM.CREATE.S", stream, timeout=TIMEOUT_S))
    try:
        for config in DEFAULTED_CONFIGS:
            expected = loop.run_until_complete(created_config(theirs, config))
            got = loop.run_until_complete(created_config(ours, config))
            assert got == expected, config
    finally:
        for nc in (theirs, ours):
            loop.run_until_complete(nc.request("$JS.API.STREAM.DELETE.S", b"", timeout=TIMEOUT_S))
