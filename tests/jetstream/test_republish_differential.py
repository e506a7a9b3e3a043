"""Stream republish, differential: the same stream configs and publishes on the real nats-server
2.15.1 and on appliance. Creates and updates are accepted or refused alike (code and text, the
republish echo); a raw core subscriber receives the same republished messages (subject, header
bytes with the time stamp masked, payload) from plain streams, headers_only, a mirror, a source,
a KV bucket (nats-py) and a stream whose copies another stream captures."""

from __future__ import annotations

import asyncio
import json
import re
import time
from urllib.parse import urlparse

import pytest
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, RePublish

from appliance.testing.rawclient import RawClient
from .conftest import api, run_with

pytestmark = pytest.mark.integration

DEADLINE_S = 20.0
TIME_STAMP = re.compile(rb"Nats-Time-Stamp: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z)\r\n")
SOURCE_IDENT = re.compile(rb"(Nats-Stream-Source: [^\r]* )[A-Za-z0-9_-]+\r\n")

# (stream config, republish): accepted or refused alike
CREATES: list[dict[str, object]] = [
    {"subjects": ["a.>"], "republish": {"dest": "rp.>"}},
    {"subjects": ["a.>"], "republish": {"src": "a.*", "dest": "rp.$1", "headers_only": True}},
    {"subjects": ["a.>"], "republish": {}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": ""}},
    {"subjects": ["a.>"], "republish": {"src": "x.>", "dest": "rp.>"}},  # src outside the subjects
    {"subjects": ["a.>"], "republish": {"src": "a.*", "dest": "rp. x.$1"}},  # a space is no error here
    {"subjects": ["a.>"], "republish": {"src": "a.b", "dest": "rp.{{partition(3)}}"}},
    {"subjects": ["a.>"], "republish": {"src": "a.*.*", "dest": "rp.{{split(2,-)}}.$1"}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": "a.x.>"}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": ">"}},
    {"subjects": ["a.>", "b.c"], "republish": {"dest": "b.*"}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": "*.>"}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": "rp.*"}},
    {"subjects": ["a.>"], "republish": {"src": "a.>", "dest": "rp"}},
    {"subjects": ["a.>"], "republish": {"src": "a.*", "dest": "rp.$2"}},
    {"subjects": ["a.>"], "republish": {"src": "a.*", "dest": "rp.{{bogus(1)}}"}},
    {"subjects": ["a.>"], "republish": {"src": "a..b", "dest": "rp"}},
    {"subjects": ["a.>"], "republish": {"src": "a.*", "dest": "rp.{{wildcard(1)}}x"}},
    {"subjects": ["a.>"], "republish": {"src": 1}},
    {"subjects": ["a.>"], "republish": {"headers_only": "yes"}},
    {"subjects": ["a.>"], "republish": {"bogus": True}},
    {"subjects": ["a.>"], "republish": None},
    {"republish": {"dest": "REPUB"}},  # no subjects: the name is the subject
    {"subjects": ["l"], "subject_transform": {"src": "l", "dest": "lt"}, "republish": {"src": ">", "dest": ">"}},
    {"subjects": ["a.>"], "subject_transform": {"src": "a.>", "dest": "t.>"}, "republish": {"dest": ">"}},
    {"subjects": ["a.x", "a.y"], "subject_transform": {"src": "a.x", "dest": "t"}, "republish": {"dest": ">"}},
    {"mirror": {"name": "ORIGIN"}, "republish": {"dest": "rp.>"}},
    {"sources": [{"name": "ORIGIN"}], "republish": {"src": "o.*", "dest": "o.copy.$1"}},
]

# republish of an update to a stream created with subjects ["s.>"] and no republish
UPDATES: list[object] = [
    {"dest": ""}, {"src": "s.>", "dest": ""}, {"src": "s.*", "dest": ""}, {"src": "s..", "dest": ""},
    {"src": "s.*", "dest": "x.$1"}, {"src": "s.*", "dest": "s.$1"}, {"dest": "rp.>", "headers_only": True},
]


def outcome(answer: dict[str, object]) -> object:
    if "error" in answer:
        return answer["error"]
    config = answer["config"]
    assert isinstance(config, dict)
    return ("ok", config.get("republish"), config.get("subjects"))


def test_creates_and_updates_are_checked_alike(servers: tuple[str, str]) -> None:
    results = []
    for url in servers:
        got: list[object] = []

        async def scenario(nc: Client, _js: object, got: list[object] = got) -> None:
            await api(nc, "$JS.API.STREAM.CREATE.ORIGIN", json.dumps({"name": "ORIGIN", "subjects": ["o.>"]}).encode())
            for config in CREATES:
                body = {"name": "REPUB", **config}
                got.append(outcome(await api(nc, "$JS.API.STREAM.CREATE.REPUB", json.dumps(body).encode())))
                await api(nc, "$JS.API.STREAM.DELETE.REPUB")
            for republish in UPDATES:
                await api(nc, "$JS.API.STREAM.CREATE.UP", json.dumps({"name": "UP", "subjects": ["s.>"]}).encode())
                body = {"name": "UP", "subjects": ["s.>"], "republish": republish}
                got.append(outcome(await api(nc, "$JS.API.STREAM.UPDATE.UP", json.dumps(body).encode())))
                got.append(outcome(await api(nc, "$JS.API.STREAM.INFO.UP")))
                await api(nc, "$JS.API.STREAM.DELETE.UP")

        run_with(url, scenario)
        results.append(got)
    real, ours = results
    assert len(real) == len(CREATES) + 2 * len(UPDATES)
    for index, (theirs, mine) in enumerate(zip(real, ours, strict=True)):
        assert mine == theirs, f"case {index}"


STREAMS: list[dict[str, object]] = [
    {"name": "PLAIN", "subjects": ["p.>"], "republish": {"src": "p.*", "dest": "rp.plain.$1"}},
    {"name": "HDRS", "subjects": ["h.>"], "republish": {"dest": "rp.hdrs.>", "headers_only": True},
     "allow_rollup_hdrs": True},
    {"name": "CAPTURE", "subjects": ["rp.cap.>"]},
    {"name": "INTO", "subjects": ["i.>"], "republish": {"dest": "rp.cap.>"}},
    {"name": "ORIGIN", "subjects": ["o.>"]},
    {"name": "MIRROR", "mirror": {"name": "ORIGIN"}, "republish": {"dest": "rp.mirror.>"}},
    {"name": "SOURCED", "sources": [{"name": "ORIGIN"}], "republish": {"src": "o.*", "dest": "rp.src.$1"}},
    {"name": "INTEREST", "subjects": ["n.>"], "retention": "interest", "republish": {"dest": "rp.interest.>"}},
    {"name": "ONE", "subjects": ["one.>"], "max_msgs": 1, "republish": {"dest": "rp.one.>"}},
    {"name": "PER", "subjects": ["per.>"], "max_msgs_per_subject": 1, "republish": {"dest": "rp.per.>"}},
]
# (subject, headers or None, payload)
PUBLISHES: list[tuple[str, dict[str, str] | None, bytes]] = [
    ("p.one", None, b"first"),
    ("p.two", {"X-Kind": "a"}, b"second"),
    ("p.one", {"Nats-Msg-Id": "m1"}, b"third"),
    ("p.one", {"Nats-Msg-Id": "m1"}, b"third"),  # duplicate: not republished
    ("p.one", {"Nats-Expected-Last-Sequence": "99"}, b"refused"),  # refused: not republished
    ("p.one.deep", None, b"src does not match"),  # stored, not republished
    ("h.k", None, b"12345"),
    ("h.k", {"Nats-Rollup": "sub", "Y": "1"}, b"rolled up"),
    ("h.empty", None, b""),
    ("i.z", None, b"captured by CAPTURE"),
    ("o.a", {"H": "v"}, b"o1"),
    ("o.b", None, b"o2"),
    ("o.a", None, b"o3"),
    ("n.x", None, b"nobody is interested"),
    ("one.a", None, b"1"), ("one.b", None, b"2"), ("one.a", None, b"3"),  # max_msgs removed one.a
    ("per.a", None, b"1"), ("per.b", None, b"2"), ("per.a", None, b"3"),
]
EXPECTED_COPIES = 3 + 3 + 1 + 3 * 2 + 3 + 3 + 3  # plain, headers only, INTO, mirror + source, KV, ONE, PER


def _frames(raw: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(subject, header block, payload) of every HMSG in a raw protocol stream."""
    out = []
    while raw:
        line, _, rest = raw.partition(b"\r\n")
        parts = line.split(b" ")
        if parts[0] == b"HMSG":
            hdr_len, total = int(parts[-2]), int(parts[-1])
            body, raw = rest[:total], rest[total + 2 :]
            out.append((parts[1], body[:hdr_len], body[hdr_len:]))
        else:
            raw = rest
    return out


def _masked(header: bytes) -> bytes:
    found = TIME_STAMP.search(header)
    assert found is not None, header
    header = TIME_STAMP.sub(b"Nats-Time-Stamp: <ts>\r\n", header)
    return SOURCE_IDENT.sub(rb"\1<ident>\r\n", header)


def _republished(url: str) -> tuple[list[tuple[bytes, bytes, bytes]], list[object]]:
    port = urlparse(url).port
    assert port is not None
    raw = RawClient(port)
    try:
        raw.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n')
        raw.send(b"SUB rp.> 1\r\nSUB kvrp.> 2\r\nPING\r\n")
        raw.read_until(b"PONG\r\n")
        extra: list[object] = []

        async def scenario(nc: Client, js: object) -> None:
            for config in STREAMS:
                answer = await api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", json.dumps(config).encode())
                assert "error" not in answer, answer
                extra.append(answer["config"].get("republish"))  # type: ignore[union-attr]
            for subject, headers, payload in PUBLISHES:
                await nc.request(subject, payload, timeout=5, headers=headers)
            kv = await nc.jetstream().create_key_value(
                KeyValueConfig(bucket="kv", history=5, republish=RePublish(src=">", dest="kvrp.>"))
            )
            await kv.put("k1", b"v1")
            await kv.delete("k1")
            await kv.purge("k1")
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:  # the mirror and the source copy in the background
                info = [await api(nc, f"$JS.API.STREAM.INFO.{name}") for name in ("MIRROR", "SOURCED")]
                if all(i["state"]["messages"] == 3 for i in info):  # type: ignore[index]
                    break
                await asyncio.sleep(0.05)
            captured = await api(nc, "$JS.API.STREAM.INFO.CAPTURE")
            extra.append(captured["state"]["messages"])  # type: ignore[index]

        run_with(url, scenario)
        raw.send(b"PING\r\n")
        data = raw.read_until(b"PONG\r\n")
        deadline = time.monotonic() + DEADLINE_S
        frames = _frames(data)
        while len(frames) < EXPECTED_COPIES and time.monotonic() < deadline:
            raw.send(b"PING\r\n")
            data += raw.read_until(b"PONG\r\n")
            frames = _frames(data)
        return frames, extra
    finally:
        raw.close()


def _by_stream(frames: list[tuple[bytes, bytes, bytes]]) -> dict[bytes, list[tuple[bytes, bytes, bytes]]]:
    """The copies of each stream in their order (streams interleave differently on the two servers)."""
    out: dict[bytes, list[tuple[bytes, bytes, bytes]]] = {}
    for subject, header, payload in frames:
        stream = re.search(rb"Nats-Stream: ([^\r]*)\r\n", header)
        assert stream is not None, header
        out.setdefault(stream.group(1), []).append((subject, _masked(header), payload))
    return out


def test_republished_messages_match_nats_server(servers: tuple[str, str]) -> None:
    real_frames, real_extra = _republished(servers[0])
    our_frames, our_extra = _republished(servers[1])
    assert len(real_frames) == EXPECTED_COPIES, [f[0] for f in real_frames]
    assert our_extra == real_extra
    real, ours = _by_stream(real_frames), _by_stream(our_frames)
    assert sorted(ours) == sorted(real)
    for stream in real:
        assert ours[stream] == real[stream], stream.decode()
