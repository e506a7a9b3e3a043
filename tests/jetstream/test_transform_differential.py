"""Subject mapping functions, differential: the same stream (and source, mirror) transforms created
on the real nats-server 2.15.1 and on appliance must be accepted or refused alike (same code and
text), and the same published subjects must be stored under the same transformed subjects —
partition included, so a subject lands in the same partition on both servers."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.aio.client import Client


pytestmark = pytest.mark.integration

DEADLINE_S = 20.0

# destinations for a stream whose transform source is `<prefix>.*.*`
DESTS = [
    "p.{{partition(3)}}", "p.{{partition(7,1)}}.$1", "p.{{Partition(5, 1, 2)}}", "p.{{ partition( 3 , 2 ) }}",
    "p.{{partition(-3,1)}}", "p.{{partition(0,1)}}", "p.{{partition(3,0)}}", "p.{{partition(3,-1)}}",
    "p.{{split(1,-)}}", "p.{{split(2, -)}}", "p.{{split(1,)}}", "p.{{split(1,ab)}}", "p.{{split(0,-)}}",
    "p.{{SplitFromLeft(1,2)}}", "p.{{splitfromright(1,2)}}", "p.{{Splitfromleft(2,1)}}",
    "p.{{slicefromleft(1,2)}}", "p.{{SliceFromRight(1,2)}}", "p.{{slicefromleft(2,3)}}",
    "p.{{left(1,2)}}", "p.{{right(1,2)}}", "p.{{Left(2,3)}}", "p.{{left(1,-2)}}", "p.{{right(2,0)}}",
    "p.$0", "p.{{wildcard(0)}}", "p.{{wildcard(-1)}}", "p.$x", "p.$+2", "p.{{ wildcard (1) }}",
    "p.{{wildcard(1)}}x", "p.x{{wildcard(1)}}", "p.{{}}", "p.$1$2", "p.{{split(1,.)}}", "", "p",
    # refused
    "p.{{partition()}}", "p.{{partition(x)}}", "p.{{split(1)}}", "p.{{split(1,-,x)}}", "p.{{split(1,a b)}}",
    "p.{{split(1,- )}}", "p.{{bogus(1)}}", "p.{{wildcard(3)}}", "p.{{split(3,-)}}", "p.{{wildcard()}}",
    "p.{{wildcard(1,2)}}", "p.{{wildcard(a)}}", "p.{{splitfromleft(1)}}", "p.{{splitfromleft(1,2,3)}}",
    "p.{{splitfromleft(a,2)}}", "p.{{PARTITION(3)}}", "p.{{SPLITFROMLEFT(1,2)}}", "p.{{LEFT(1,2)}}",
    "p.{{WildCard(1)}}", "p.{{ }}", "p.{{wildcard(1)}}{{wildcard(2)}}", "p.{{random(1,2)}}", "p.{{random()}}",
    "p.{{partition(3,1,x)}}", "p.{{left(1,99999999999)}}", "p.{{partition(99999999999)}}",
    "p.a b", "p.>.x", "p..x", "p.*", "p.>",
]
SECOND_TOKENS = ["abcdef", "-a--b-", "--a", "a-", "x", "ab", "abcdefg", "h\u00e9llo", "ab-cd-ef"]
FIRST_TOKENS = ["k1", "order-17", "abc", "z"]

# (src, dest) for a stream whose subjects are `<prefix>.>`: sources without `*`, and with `>`
SHAPES = [
    ("{p}.x.y", "q.{{partition(3)}}"), ("{p}.x.y", "q.{{partition(3,1)}}"), ("{p}.x.y", "q.{{wildcard(1)}}"),
    ("{p}.x.y", "q.{{split(1,-)}}"), ("{p}.x.y", "q.$1"), ("{p}.>", "q.{{partition(4)}}.>"),
    ("{p}.>", "q.$1.>"), ("{p}.>", "q.{{split(1,-)}}.>"), ("", "all.>"), ("{p}.*", ""),
    ("{p}.*", "q.>"), ("{p}.>", "q.$1"), ("bad..", "x"),
]

SOURCE_TRANSFORMS: list[list[dict[str, str]]] = [
    [{"src": "o.*.*", "dest": "s.{{partition(4,1,2)}}.{{split(2,-)}}"}],
    [{"src": "o.*.*", "dest": "s.{{slicefromright(2,2)}}.{{left(1,1)}}"}],
    [{"src": "o.*.*", "dest": "s.{{bogus(1)}}"}],
    [{"src": "o..", "dest": "s"}],
    [{"src": "o.*.*", "dest": "s.$1"}, {"src": "o.a.*", "dest": "t.$1"}],  # overlapping
    [{"src": "o.a.*", "dest": "s.$1"}, {"src": "o.b.*", "dest": "t.$1"}],
]


async def request(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


def outcome(answer: dict[str, object]) -> object:
    """What is compared of a create: the error, or the transform config echoed."""
    if "error" in answer:
        return answer["error"]
    config = answer["config"]
    assert isinstance(config, dict)
    return ("ok", config.get("subject_transform"), config.get("sources"), config.get("mirror"))


async def stored_subjects(nc: Client, stream: str, count: int) -> list[object]:
    out: list[object] = []
    for seq in range(1, count + 1):
        answer = await request(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        message = answer.get("message")
        out.append(message["subject"] if isinstance(message, dict) else answer.get("error"))
    return out


async def wait_messages(nc: Client, stream: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        info = await request(nc, f"$JS.API.STREAM.INFO.{stream}")
        if info["state"]["messages"] >= count:  # type: ignore[index]
            return
        assert time.monotonic() < deadline, f"{stream} did not reach {count} messages"
        await asyncio.sleep(0.02)


async def stream_transforms(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        for index, dest in enumerate(DESTS):
            prefix = f"in{index}"
            body = {"name": f"T{index}", "subjects": [f"{prefix}.*.*"],
                    "subject_transform": {"src": f"{prefix}.*.*", "dest": dest}}
            created = await request(nc, f"$JS.API.STREAM.CREATE.T{index}", body)
            answers.append((dest, outcome(created)))
            if "error" in created:
                continue
            subjects = [f"{prefix}.{first}.{second}" for first in FIRST_TOKENS for second in SECOND_TOKENS]
            for subject in subjects:
                await nc.request(subject, b"x", timeout=5)
            answers.append((dest, await stored_subjects(nc, f"T{index}", len(subjects))))
        for index, (src, dest) in enumerate(SHAPES):
            prefix = f"sh{index}"
            body = {"name": f"S{index}", "subjects": [f"{prefix}.>"],
                    "subject_transform": {"src": src.format(p=prefix), "dest": dest}}
            created = await request(nc, f"$JS.API.STREAM.CREATE.S{index}", body)
            answers.append((src, dest, outcome(created)))
            if "error" not in created:
                subjects = [f"{prefix}.x.y", f"{prefix}.a-b.c", f"{prefix}.q"]
                for subject in subjects:
                    await nc.request(subject, b"x", timeout=5)
                answers.append(await stored_subjects(nc, f"S{index}", len(subjects)))
    finally:
        await nc.close()
    return answers


async def source_transforms(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        await request(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        origin = [f"o.{first}.{second}" for first in ("a", "b", "key-9") for second in ("x-y", "abcde", "q")]
        for subject in origin:
            await nc.request(subject, b"x", timeout=5)
        for index, transforms in enumerate(SOURCE_TRANSFORMS):
            for kind in ("sources", "mirror"):
                name = f"{kind[:3].upper()}{index}"
                link = {"name": "O", "subject_transforms": transforms}
                body = {"name": name, kind: [link] if kind == "sources" else link}
                created = await request(nc, f"$JS.API.STREAM.CREATE.{name}", body)
                answers.append((kind, index, outcome(created)))
                if "error" not in created and index < 2:
                    await wait_messages(nc, name, len(origin))
                    answers.append(await stored_subjects(nc, name, len(origin)))
        both = {"name": "MF", "mirror": {"name": "O", "filter_subject": "o.a.>",
                                         "subject_transforms": [{"src": "o.>", "dest": "m.>"}]}}
        answers.append(outcome(await request(nc, "$JS.API.STREAM.CREATE.MF", both)))  # 10150
    finally:
        await nc.close()
    return answers


def test_stream_transform_functions_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(stream_transforms(real_url), 90))
    got = asyncio.run(asyncio.wait_for(stream_transforms(our_url), 90))
    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        assert have == want


def test_source_and_mirror_transform_functions_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(source_transforms(real_url), 60))
    got = asyncio.run(asyncio.wait_for(source_transforms(our_url), 60))
    for want, have in zip(expected, got, strict=True):
        assert have == want


async def random_partitions(url: str) -> list[str]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        transform = {"src": "r.*", "dest": "r.{{random(4)}}.$1"}
        body = {"name": "R", "subjects": ["r.*"], "subject_transform": transform}
        assert "error" not in await request(nc, "$JS.API.STREAM.CREATE.R", body)
        for index in range(20):
            await nc.request(f"r.m{index}", b"x", timeout=5)
        return [str(s) for s in await stored_subjects(nc, "R", 20)]
    finally:
        await nc.close()


def test_random_lands_below_its_ceiling_on_both_servers(servers: tuple[str, str]) -> None:
    for url in servers:
        stored = asyncio.run(asyncio.wait_for(random_partitions(url), 30))
        assert [s.split(".")[2] for s in stored] == [f"m{i}" for i in range(20)]
        assert {s.split(".")[1] for s in stored} <= {"0", "1", "2", "3"}


def random_dests(seed: int, count: int) -> list[str]:
    """Destinations for a `<prefix>.*.*` source drawn from the mapping grammar, valid or not:
    function names in several spellings, argument counts and values in and out of range."""
    import random

    rng = random.Random(seed)
    names = ["wildcard", "Wildcard", "partition", "Partition", "split", "Split", "splitFromLeft",
             "SplitFromRight", "slicefromleft", "SliceFromRight", "left", "Right", "random", "LEFT", "nope"]
    args = ["0", "1", "2", "3", "-1", "x", "", " 1", "2 ", "-", "ab", "99999999999"]

    def token() -> str:
        roll = rng.random()
        if roll < 0.2:
            return rng.choice(["lit", "$1", "$2", "$3", "$x", "$0"])
        inner = ", ".join(rng.choice(args) for _ in range(rng.randint(0, 3)))
        return f"{{{{{rng.choice(['', ' '])}{rng.choice(names)}({inner}){rng.choice(['', ' '])}}}}}"

    return ["d." + ".".join(token() for _ in range(rng.randint(1, 3))) for _ in range(count)]


FUZZ_SUBJECTS = ["abcdef.x", "-a-b-.yz", "q.abcdefghij", "h\u00e9llo.w-o-r-l-d"]


async def fuzz(url: str, dests: list[str]) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []
    try:
        for index, dest in enumerate(dests):
            prefix = f"f{index}"
            body = {"name": f"F{index}", "subjects": [f"{prefix}.*.*"],
                    "subject_transform": {"src": f"{prefix}.*.*", "dest": dest}}
            created = await request(nc, f"$JS.API.STREAM.CREATE.F{index}", body)
            answers.append((dest, created.get("error")))
            if "error" in created or "random" in dest.lower():
                continue
            for subject in FUZZ_SUBJECTS:
                await nc.request(f"{prefix}.{subject}", b"x", timeout=5)
            answers.append((dest, await stored_subjects(nc, f"F{index}", len(FUZZ_SUBJECTS))))
    finally:
        await nc.close()
    return answers


@pytest.mark.parametrize("seed", [7, 2026])
def test_random_destinations_as_nats_server(servers: tuple[str, str], seed: int) -> None:
    dests = random_dests(seed, 60)
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(fuzz(real_url, dests), 90))
    got = asyncio.run(asyncio.wait_for(fuzz(our_url, dests), 90))
    for want, have in zip(expected, got, strict=True):
        assert have == want
    assert any(error is None for _, error in expected[::2] if not isinstance(error, list))  # some valid
