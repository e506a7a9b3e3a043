"""Stream sources: the same scenario against nats-server 2.15.1 and appliance (answers, copied
messages with their Nats-Stream-Source headers, source info), and a restart that neither loses
nor repeats copies. The header's last token (a server-chosen ident) and times are masked."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from appliance.testing.inproc import InProcessServer

from .conftest import api, run_with

pytestmark = pytest.mark.integration

TIME_KEYS = {"created", "ts", "first_ts", "last_ts", "time", "active"}
DEADLINE_S = 10.0


def mask(value: object) -> object:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if key in TIME_KEYS:
                out[key] = "<time>"
            elif key == "hdrs" and isinstance(item, str):
                text = base64.b64decode(item).decode()
                out[key] = [line.rsplit(" ", 1)[0] if "Stream-Source" in line else line
                            for line in text.split("\r\n")]
            else:
                out[key] = mask(item)
        return out
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


async def request(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=5)).data)


async def wait_messages(nc: Client, stream: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        info = await request(nc, f"$JS.API.STREAM.INFO.{stream}")
        if info["state"]["messages"] >= count:  # type: ignore[index]
            return
        assert time.monotonic() < deadline, f"{stream} did not reach {count} messages"
        await asyncio.sleep(0.02)


async def scenario(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []

    async def step(subject: str, body: object = b"") -> None:
        answers.append(mask(await request(nc, subject, body)))

    try:
        await step("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for index in range(5):
            headers = {"Nats-Msg-Id": "id1"} if index == 1 else None
            await nc.request(f"o.{'ab'[index % 2]}", f"m{index}".encode(), headers=headers, timeout=5)
        await step("$JS.API.STREAM.MSG.DELETE.O", {"seq": 3})
        everything = {"name": "ALL", "subjects": ["all.>"], "sources": [{"name": "O"}]}
        await step("$JS.API.STREAM.CREATE.ALL", everything)
        await step("$JS.API.STREAM.CREATE.SOME", {"name": "SOME", "sources": [
            {"name": "O", "filter_subject": "o.a", "opt_start_seq": 2}]})
        await step("$JS.API.STREAM.CREATE.NONE", {"name": "NONE", "sources": [{"name": "NOPE"}]})
        await wait_messages(nc, "ALL", 4)
        await wait_messages(nc, "SOME", 1)
        await nc.request("all.direct", b"own", timeout=5)
        await nc.request("o.a", b"m5", timeout=5)
        await wait_messages(nc, "ALL", 6)
        await wait_messages(nc, "SOME", 2)
        for stream, count in (("ALL", 6), ("SOME", 2)):
            await step(f"$JS.API.STREAM.INFO.{stream}")
            for seq in range(1, count + 1):
                await step(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        for bad in (
            {"name": "D", "sources": [{"name": "O", "filter_subject": "o.a"}] * 2},
            {"name": "D", "sources": [{"name": ""}]},
            {"name": "D", "sources": [{"name": "O", "filter_subject": "bad..x"}]},
            {"name": "D", "sources": [{"name": "O", "bogus": 1}]},
        ):
            await step("$JS.API.STREAM.CREATE.D", bad)
    finally:
        await nc.close()
    return answers


async def mirror_scenario(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []

    async def step(subject: str, body: object = b"") -> None:
        answers.append(mask(await request(nc, subject, body)))

    try:
        await step("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for index in range(6):
            await nc.request(f"o.{'ab'[index % 2]}", f"m{index}".encode(), timeout=5)
        await step("$JS.API.STREAM.MSG.DELETE.O", {"seq": 3})
        await step("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
        await step("$JS.API.STREAM.CREATE.MS", {"name": "MS", "mirror": {"name": "O", "opt_start_seq": 2}})
        filtered = {"name": "MF", "mirror": {"name": "O", "filter_subject": "o.a"}}
        await step("$JS.API.STREAM.CREATE.MF", filtered)
        for bad in (
            {"name": "X", "mirror": {"name": ""}},
            {"name": "X", "mirror": {"name": "O"}, "first_seq": 5},
            {"name": "X", "subjects": ["x"], "mirror": {"name": "O"}},
            {"name": "X", "mirror": {"name": "O"}, "sources": [{"name": "O"}]},
        ):
            await step("$JS.API.STREAM.CREATE.X", bad)
        await wait_messages(nc, "M", 5)
        await wait_messages(nc, "MS", 4)
        await wait_messages(nc, "MF", 2)
        await nc.request("o.a", b"late", timeout=5)
        await wait_messages(nc, "M", 6)
        for stream in ("M", "MS", "MF"):
            await step(f"$JS.API.STREAM.INFO.{stream}", {"deleted_details": True})
        for seq in range(1, 8):
            await step("$JS.API.STREAM.MSG.GET.MF", {"seq": seq})
            await step("$JS.API.STREAM.MSG.GET.M", {"seq": seq})
        await step("$JS.API.STREAM.UPDATE.M", {"name": "M", "mirror": {"name": "MS"}})
        await step("$JS.API.STREAM.UPDATE.M", {"name": "M"})  # promoted: a stream of its own
        await nc.request("M", b"own", timeout=5)
        await step("$JS.API.STREAM.INFO.M")
    finally:
        await nc.close()
    return answers


TRANSFORMS: list[tuple[list[dict[str, str]], int]] = [  # (subject_transforms, messages copied)
    ([{"src": "o.*.*", "dest": "x.{{wildcard(2)}}.{{wildcard(1)}}"}], 2),
    ([{"src": "o.>", "dest": "y.>"}], 2),
    ([{"src": "o.*.b", "dest": "z.$1"}], 1),  # o.c.d matches no transform: not copied
    ([{"src": "o.a.>", "dest": "q.>"}, {"src": "o.c.>", "dest": "r.>"}], 2),
    ([{"src": "o.*.*", "dest": "w.*.*"}], 0),  # 10146
    ([{"src": "o.*", "dest": "v.{{wildcard(2)}}"}], 0),  # 10146, index out of range
    ([{"src": "o..x", "dest": "v"}], 0),  # 10145
    ([{"src": "o.>", "dest": "v.*"}], 0),  # 10146
]


async def transform_scenario(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []

    async def step(subject: str, body: object = b"") -> None:
        answers.append(mask(await request(nc, subject, body)))

    try:
        await step("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"]})
        for subject in ("o.a.b", "o.c.d"):
            await nc.request(subject, subject.encode(), timeout=5)
        for index, (transforms, _) in enumerate(TRANSFORMS):
            body = {"name": f"T{index}", "sources": [{"name": "O", "subject_transforms": transforms}]}
            await step(f"$JS.API.STREAM.CREATE.T{index}", body)
        mirrored = {"name": "MT", "mirror": {"name": "O", "subject_transforms": [{"src": "o.>", "dest": "m.>"}]}}
        await step("$JS.API.STREAM.CREATE.MT", mirrored)
        both = {"name": "SF", "sources": [{"name": "O", "filter_subject": "o.a.>",
                                           "subject_transforms": [{"src": "o.>", "dest": "m.>"}]}]}
        await step("$JS.API.STREAM.CREATE.SF", both)  # 10144
        await wait_messages(nc, "MT", 2)
        for index, (_, count) in enumerate(TRANSFORMS):
            if count:
                await wait_messages(nc, f"T{index}", count)
                await step(f"$JS.API.STREAM.INFO.T{index}")
                for seq in range(1, count + 1):
                    await step(f"$JS.API.STREAM.MSG.GET.T{index}", {"seq": seq})
        await step("$JS.API.STREAM.INFO.MT")
        for seq in (1, 2):
            await step("$JS.API.STREAM.MSG.GET.MT", {"seq": seq})
    finally:
        await nc.close()
    return answers


async def stream_transform_scenario(url: str) -> list[object]:
    nc = await nats.connect(url, allow_reconnect=False)
    answers: list[object] = []

    async def step(subject: str, body: object = b"") -> None:
        answers.append(mask(await request(nc, subject, body)))

    try:
        swap = {"src": "o.*.*", "dest": "n.{{wildcard(2)}}.{{wildcard(1)}}"}
        await step("$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": ["o.>"], "subject_transform": swap})
        for subject in ("o.a.b", "o.c"):  # o.c matches no transform: stored as it is
            answers.append(json.loads((await nc.request(subject, b"x", timeout=5)).data))
        for seq in (1, 2):
            await step("$JS.API.STREAM.MSG.GET.T", {"seq": seq})
        for name, transform in (
            ("T2", {"src": "p.*", "dest": "q.$2"}),  # 10156
            ("T3", {"src": "r..", "dest": "q"}),  # 10155
            ("T4", {"src": "", "dest": "u.>"}),
            ("T5", {"src": "v.>", "dest": ""}),
        ):
            body = {"name": name, "subjects": [f"{name.lower()}.>"], "subject_transform": transform}
            await step(f"$JS.API.STREAM.CREATE.{name}", body)
        await nc.request("t4.x", b"y", timeout=5)
        await step("$JS.API.STREAM.MSG.GET.T4", {"seq": 1})
        await step("$JS.API.STREAM.UPDATE.T", {"name": "T", "subjects": ["o.>"],
                                               "subject_transform": {"src": "o.>", "dest": "m.>"}})
        await nc.request("o.z", b"z", timeout=5)
        await step("$JS.API.STREAM.MSG.GET.T", {"seq": 3})
    finally:
        await nc.close()
    return answers


@pytest.mark.parametrize(
    "run",
    [scenario, mirror_scenario, transform_scenario, stream_transform_scenario],
    ids=["sources", "mirrors", "subject_transforms", "stream_subject_transform"],
)
def test_answers_as_nats_server(servers: tuple[str, str], run: Callable[[str], Awaitable[list[object]]]) -> None:
    """The same scenario against nats-server 2.15.1 and appliance gives the same answers, one by one."""
    real_url, our_url = servers
    expected = asyncio.run(asyncio.wait_for(run(real_url), 60))
    got = asyncio.run(asyncio.wait_for(run(our_url), 60))
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"answer {index}"


def test_sourcing_resumes_after_restart_without_repeats(store_dir: str) -> None:
    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="O", subjects=["o.>"])
        for index in range(3):
            await js.publish("o.x", f"m{index}".encode())
        body = json.dumps({"name": "S", "sources": [{"name": "O"}]}).encode()
        await api(nc, "$JS.API.STREAM.CREATE.S", body)
        await wait_messages(nc, "S", 3)

    async def after(nc: Client, js: JetStreamContext) -> None:
        await js.publish("o.x", b"m3")
        await wait_messages(nc, "S", 4)
        info = await api(nc, "$JS.API.STREAM.INFO.S")
        assert info["state"]["messages"] == 4 and info["sources"][0]["seq"] == 4
        payloads = [(await js.get_msg("S", seq)).data for seq in range(1, 5)]
        assert payloads == [b"m0", b"m1", b"m2", b"m3"]

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)


def test_transforms_rename_by_wildcards_and_tail() -> None:
    from appliance.jetstream.errors import JsApiError
    from appliance.jetstream.transform import compile_transform, first_match

    swap = compile_transform("o.*.*", "x.{{wildcard(2)}}.{{ Wildcard(1) }}")
    assert swap.apply("o.a.b") == "x.b.a" and swap.apply("o.a") is None
    assert compile_transform("o.*.b", "z.$1").apply("o.q.b") == "z.q"
    assert compile_transform("o.>", "y.>").apply("o.a.b.c") == "y.a.b.c"
    assert compile_transform("", "").apply("any.thing") == "any.thing"
    chain = [compile_transform("o.a.>", "q.>"), compile_transform("o.>", "r.>")]
    assert [first_match(chain, s) for s in ("o.a.1", "o.b.2", "p.c")] == ["q.1", "r.b.2", None]
    for src, dest, code in (("o.*", "v.$2", 10146), ("o..x", "v", 10145), ("o.*", "v.{{bogus(3,1)}}", 10146)):
        with pytest.raises(JsApiError) as caught:
            compile_transform(src, dest)
        assert caught.value.entry.err_code == code


def test_mirror_resumes_after_restart_with_the_origin_sequences(store_dir: str) -> None:
    async def before(nc: Client, js: JetStreamContext) -> None:
        await js.add_stream(name="O", subjects=["o.>"])
        for index in range(4):
            await js.publish("o.x", f"m{index}".encode())
        await js.delete_msg("O", 2)
        body = json.dumps({"name": "M", "mirror": {"name": "O"}}).encode()
        await api(nc, "$JS.API.STREAM.CREATE.M", body)
        await wait_messages(nc, "M", 3)

    async def after(nc: Client, js: JetStreamContext) -> None:
        await js.publish("o.x", b"m4")
        await wait_messages(nc, "M", 4)
        info = await api(nc, "$JS.API.STREAM.INFO.M", b'{"deleted_details":true}')
        assert (info["state"]["first_seq"], info["state"]["last_seq"], info["state"]["deleted"]) == (1, 5, [2])
        origin = await js.get_msg("O", 5)
        copy = await js.get_msg("M", 5)
        assert (copy.subject, copy.data, copy.time) == (origin.subject, origin.data, origin.time)

    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, before)
    with InProcessServer(jetstream_dir=store_dir) as server:
        run_with(server.url, after)
