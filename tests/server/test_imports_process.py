"""Account imports with real processes and nats-py: a stream import with a prefix and a service import
across two workers, across a two-server cluster, a refused import at start, and the same scenario
against nats-server 2.15.1 configured the same way (what each client receives, and the error texts)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError

from appliance.testing.clients import connect_on, flush_after_subs, request_replies
from appliance.testing.natsserver import NatsServer, nats_server_binary
from appliance.testing.process import ApplianceProcess, free_port

ACCOUNTS = """
accounts {
  A: { users: [{user: a, password: a}],
       exports: [{stream: "foo.>"}, {service: "req.>"}, {service: "stream.req", response_type: stream},
                 {stream: "secret.>", accounts: [C]}] }
  B: { users: [{user: b, password: b}],
       imports: [{stream: {account: A, subject: "foo.>"}, prefix: "p"},
                 {service: {account: A, subject: "req.>"}, to: "local.>"},
                 {service: {account: A, subject: "stream.req"}}] }
  C: { users: [{user: c, password: c}], imports: [{stream: {account: A, subject: "secret.>"}, to: "s.>"}] }
}
"""
DEADLINE_S = 20.0


async def wait_for_messages(got: list[object], count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def scenario(url_a: str, url_b: str, *, b_client: object = None, a_client: object = None) -> list[object]:
    """What B's and C's clients receive from A's publishes and services; comparable between servers."""
    seen: list[object] = []
    a = a_client or await nats.connect(url_a.replace("//", "//a:a@"))
    b = b_client or await nats.connect(url_b.replace("//", "//b:b@"))
    c = await nats.connect(url_b.replace("//", "//c:c@"))
    try:
        got: list[tuple[str, bytes]] = []

        async def on_b(msg: nats.aio.msg.Msg) -> None:
            got.append(("b", msg.subject, msg.data))

        async def on_c(msg: nats.aio.msg.Msg) -> None:
            got.append(("c", msg.subject, msg.data))

        await b.subscribe("p.foo.*", cb=on_b)
        await b.subscribe("foo.>", cb=on_b)  # B's own subject space: nothing of A's arrives here
        await c.subscribe("s.>", cb=on_c)
        await flush_after_subs(b)
        await flush_after_subs(c)

        calls: list[str] = []

        async def service(msg: nats.aio.msg.Msg) -> None:
            calls.append(msg.subject)
            info = (msg.headers or {}).get("Nats-Request-Info", "")
            await msg.respond(msg.subject.encode() + b" " + re.sub(r',"rtt":\d+', "", info).encode())

        async def streamer(msg: nats.aio.msg.Msg) -> None:
            for part in (b"one", b"two", b""):
                await a.publish(msg.reply, part)

        await a.subscribe("req.>", cb=service)
        await a.subscribe("stream.req", cb=streamer)
        await flush_after_subs(a)
        await asyncio.sleep(0.3)  # interest of A's subscriptions reaches the other worker or server
        for i in range(3):
            await a.publish("foo.x", b"m%d" % i)
        await a.publish("secret.k", b"for c")
        await a.flush()
        await wait_for_messages(got, 4)
        seen.append(sorted(got))
        reply = await b.request("local.ping", b"?", timeout=5)
        seen.append(reply.data)
        parts = await request_replies(b, "stream.req")
        await wait_for_messages(parts, 3)
        seen.append(parts)
        seen.append(list(calls))  # each request reached the exporter once
        with pytest.raises(NoRespondersError):
            await b.request("local2.nothing", b"?", timeout=5)  # no import: no responders in B
        await a.close()
        await asyncio.sleep(0.2)
        with pytest.raises(NoRespondersError):
            await b.request("local.ping", b"?", timeout=5)  # imported, nobody in A
        seen.append("no responders")
    finally:
        for nc in (a, b, c):
            if not nc.is_closed:
                await nc.close()
    return seen


EXPECTED = [
    [("b", "p.foo.x", b"m0"), ("b", "p.foo.x", b"m1"), ("b", "p.foo.x", b"m2"), ("c", "s.k", b"for c")],
    b'req.ping {"acc":"B"}',
    [b"one", b"two", b""],
    ["req.ping"],
    "no responders",
]


def test_imports_across_two_workers(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "s.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n" + ACCOUNTS)
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"nats://127.0.0.1:{port}"

        async def run() -> list[object]:
            a = await connect_on(url.replace("//", "//a:a@"), 0, 2)
            b = await connect_on(url.replace("//", "//b:b@"), 1, 2)
            return await scenario(url, url, a_client=a, b_client=b)

        assert asyncio.run(run()) == EXPECTED


def test_a_request_seen_by_a_sibling_reaches_the_exporter_once(tmp_path: Path) -> None:
    """A B client on the other worker subscribes the import subject itself: the request crosses to that
    worker for it, and that worker must not send it into A a second time (nats-server: routed
    requests never go through a service import)."""
    port = free_port()
    config = tmp_path / "s.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n" + ACCOUNTS)
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
        url = f"nats://127.0.0.1:{port}"

        async def run() -> tuple[list[str], list[str], bytes]:
            a = await connect_on(url.replace("//", "//a:a@"), 1, 2)
            watcher = await connect_on(url.replace("//", "//b:b@"), 0, 2)
            requester = await connect_on(url.replace("//", "//b:b@"), 1, 2)
            calls: list[str] = []
            watched: list[str] = []

            async def service(msg: nats.aio.msg.Msg) -> None:
                calls.append(msg.subject)
                await msg.respond(b"ok")

            async def watch(msg: nats.aio.msg.Msg) -> None:
                watched.append(msg.subject)

            await a.subscribe("req.>", cb=service)
            await watcher.subscribe("local.>", cb=watch)
            await flush_after_subs(a)
            await flush_after_subs(watcher)
            await asyncio.sleep(0.3)  # the watcher's interest reaches worker 1
            reply = await requester.request("local.ping", b"", timeout=5)
            await wait_for_messages(watched, 1)
            await requester.flush()
            await a.flush()
            for nc in (a, watcher, requester):
                await nc.close()
            return calls, watched, reply.data

        assert asyncio.run(run()) == (["req.ping"], ["local.ping"], b"ok")


def two_node_configs(tmp_path: Path, clients: list[int], extra: str = "") -> list[Path]:
    """Config files n0.conf and n1.conf of a two-server cluster C with ACCOUNTS, listening for clients
    on the given ports, extra lines added to each."""
    routes = [free_port(), free_port()]
    configs = []
    for i in range(2):
        config = tmp_path / f"n{i}.conf"
        config.write_text(
            f"server_name: n{i}\nlisten: 127.0.0.1:{clients[i]}\n{extra}"
            f"cluster {{ name: C, listen: 127.0.0.1:{routes[i]}, routes: [nats-route://127.0.0.1:{routes[1 - i]}] }}\n"
            + ACCOUNTS)
        configs.append(config)
    return configs


def test_imports_across_a_two_server_cluster(tmp_path: Path) -> None:
    clients = [free_port(), free_port()]
    configs = two_node_configs(tmp_path, clients, "appliance { workers: 2 }\n")
    servers = [ApplianceProcess(["-c", str(config)], log_dir=tmp_path) for config in configs]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_log("route connection created")
        got = asyncio.run(scenario(f"nats://127.0.0.1:{clients[0]}", f"nats://127.0.0.1:{clients[1]}"))
        assert got == EXPECTED
    finally:
        for server in servers:
            if server.process is not None:
                server.stop()


@pytest.mark.parametrize("importer_on", ["appliance", "nats-server"])
def test_imports_across_an_appliance_and_a_go_node(tmp_path: Path, importer_on: str) -> None:
    """A plain nats-server in the cluster: the importer's interest and the responses cross the route
    whichever side holds the importing client."""
    clients = [free_port(), free_port()]
    configs = two_node_configs(tmp_path, clients)
    ours = ApplianceProcess(["-c", str(configs[0])], log_dir=tmp_path)
    log = tmp_path / "go.log"
    with open(log, "wb") as out:
        go = subprocess.Popen([nats_server_binary(), "-c", str(configs[1])], stdout=out, stderr=subprocess.STDOUT)
    try:
        ours.start()
        ours.wait_log("route connection created")
        deadline = time.monotonic() + DEADLINE_S
        while "Route connection created" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        appliance_url, go_url = f"nats://127.0.0.1:{clients[0]}", f"nats://127.0.0.1:{clients[1]}"
        urls = (go_url, appliance_url) if importer_on == "appliance" else (appliance_url, go_url)
        assert asyncio.run(scenario(*urls)) == EXPECTED
    finally:
        go.terminate()
        go.wait(10)
        if ours.process is not None:
            ours.stop()


def test_the_same_scenario_on_nats_server(tmp_path: Path) -> None:
    config = tmp_path / "g.conf"
    config.write_text(ACCOUNTS)
    with NatsServer(["-c", str(config)]) as server:
        assert asyncio.run(scenario(server.url, server.url)) == EXPECTED


REFUSED = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{stream: "foo.>", accounts: [C]}, {service: "req"}] }
  B: { users: [{user: b, password: b}], imports: [{stream: {account: A, subject: "foo.>"}},
                                                  {service: {account: A, subject: "other"}}] }
  C: {}
}
"""


CYCLE = """
accounts {
  A: { exports: [{stream: "foo.>"}, {service: "q"}],
       imports: [{stream: {account: B, subject: "foo.>"}}, {service: {account: B, subject: "q"}}] }
  B: { exports: [{stream: "foo.>"}, {service: "q"}],
       imports: [{stream: {account: A, subject: "foo.>"}}, {service: {account: A, subject: "q"}}] }
}
"""


MAPPING = """
accounts {
  A: { exports: [{service: "req.*"}, {stream: "foo.*"}] }
  B: { imports: [{service: {account: A, subject: "req.*"}, to: "local"}, {stream: {account: A, subject: "foo.*"}, to: "bar"}] }
}
"""


@pytest.mark.parametrize(("text", "expected"), [
    (REFUSED, ['Error adding stream import "foo.>": stream import not authorized',
               'Error adding service import "other": service import not authorized']),
    (CYCLE, ['Error adding stream import "foo.>": import forms a cycle',
             'Error adding service import "q": import forms a cycle']),
    (MAPPING, ['Error adding stream import "foo.*": failed to create mapping transform for stream import subject '
               'from "foo.*" to "bar": invalid mapping destination: not using all of the token wildcard(s) in bar',
               'Error adding service import "req.*": failed to create mapping transform for service import subject '
               'from "local" to "req.*": invalid mapping destination: not using all of the token wildcard(s) in local']),
], ids=["not-authorized", "cycle", "mapping"])
def test_a_refused_import_stops_the_start_with_nats_servers_texts(tmp_path: Path, text: str,
                                                                   expected: list[str]) -> None:
    config = tmp_path / "bad.conf"
    config.write_text(text)
    ours = subprocess.run([str(Path(nats_server_binary()).with_name("appliance")), "run", "-c", str(config)],
                          capture_output=True, text=True, timeout=60)
    theirs = subprocess.run([nats_server_binary(), "-c", str(config)], capture_output=True, text=True, timeout=30)
    assert ours.returncode != 0 and theirs.returncode != 0

    def texts(output: str) -> list[str]:
        return re.findall(r"bad\.conf:(\d+):\d+: (Error adding .*)", output)

    assert texts(ours.stdout + ours.stderr) == texts(theirs.stdout + theirs.stderr) == [("2", e) for e in expected]


def accountz(port: int, account: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accountz?acc={account}", timeout=10) as response:
        detail = json.loads(response.read())["account_detail"]
    imports = [i for i in detail.get("imports", []) if i["account"] != "$SYS"]  # nats-server's system services
    system = len(detail.get("imports", [])) - len(imports)  # each a subscription at nats-server
    return {"exports": sorted(detail.get("exports", []), key=json.dumps), "imports": sorted(imports, key=json.dumps),
            "subscriptions": detail["subscriptions"] - system}


def test_accountz_lists_imports_and_exports_as_nats_server(tmp_path: Path) -> None:
    ours, theirs = free_port(), free_port()
    config = tmp_path / "m.conf"
    config.write_text(f"listen: 127.0.0.1:{free_port()}\nhttp: 127.0.0.1:{ours}\nappliance {{ workers: 2 }}\n"
                      + ACCOUNTS)
    go_config = tmp_path / "g.conf"
    go_config.write_text(ACCOUNTS)
    with ApplianceProcess(["-c", str(config)], log_dir=tmp_path), NatsServer(["-c", str(go_config), "-m", str(theirs)]):
        for account in ("A", "B", "C"):
            assert accountz(ours, account) == accountz(theirs, account), account
        assert accountz(ours, "A")["exports"] and accountz(ours, "B")["imports"]


JS_ACCOUNTS = """
accounts {
  A: { users: [{user: a, password: a}], jetstream: enabled, exports: [{stream: "foo.>"}, {service: "$JS.API.>"}] }
  B: { users: [{user: b, password: b}], jetstream: enabled,
       imports: [{stream: {account: A, subject: "foo.>"}, prefix: "p"},
                 {service: {account: A, subject: "$JS.API.>"}, to: "a.api.>"}] }
}
"""


async def jetstream_scenario(url: str) -> list[object]:
    """A stream in B stores what it imports from A; B reaches A's JetStream API through a service import."""
    a = await nats.connect(url.replace("//", "//a:a@"))
    b = await nats.connect(url.replace("//", "//b:b@"))
    try:
        await b.jetstream().add_stream(name="IMPORTED", subjects=["p.foo.>"])
        await a.jetstream().add_stream(name="OWN", subjects=["own.>"])
        await a.publish("foo.x", b"one")
        await a.flush()
        deadline = time.monotonic() + DEADLINE_S
        while (await b.jetstream().stream_info("IMPORTED")).state.messages < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stored = await b.jetstream().get_msg("IMPORTED", 1)
        answer = json.loads((await b.request("a.api.STREAM.INFO.OWN", b"", timeout=5)).data)
        return [stored.subject, stored.data, answer["config"]["name"], answer["state"]["messages"]]
    finally:
        await a.close()
        await b.close()


def run_on(kind: str, tmp_path: Path, text: str, scenario: Callable[[str], Coroutine[Any, Any, list[object]]],
           *, appliance_lines: str = "") -> list[object]:
    """Start an appliance (kind "appliance", appliance_lines added to its config) or nats-server 2.15.1
    with the config text, run scenario with its client URL, stop the server: what scenario returned."""
    config = tmp_path / "server.conf"
    if kind == "appliance":
        port = free_port()
        config.write_text(f"listen: 127.0.0.1:{port}\n{appliance_lines}" + text)
        with ApplianceProcess(["-c", str(config)], log_dir=tmp_path):
            return asyncio.run(scenario(f"nats://127.0.0.1:{port}"))
    config.write_text(text)
    with NatsServer(["-c", str(config)]) as server:
        return asyncio.run(scenario(server.url))


@pytest.mark.parametrize("kind", ["appliance", "nats-server"])
def test_jetstream_through_imports(tmp_path: Path, kind: str) -> None:
    text = f"jetstream {{ store_dir: \"{tmp_path / 'store'}\" }}\n" + JS_ACCOUNTS
    got = run_on(kind, tmp_path, text, jetstream_scenario, appliance_lines="appliance { workers: 2 }\n")
    assert got == ["p.foo.x", b"one", "OWN", 0]


CHAIN = """
accounts {
  C: { users: [{user: c, password: c}], exports: [{service: "q"}] }
  A: { users: [{user: a, password: a}], exports: [{service: "q"}], imports: [{service: {account: C, subject: "q"}}] }
  B: { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "q"}, to: "ask"}] }
}
"""


async def chain_scenario(url: str) -> list[object]:
    """B asks A, whose service is an import of C's: the answer comes back through both mappings, and C sees
    the first requester's account with the hop's account as `svc` (a client's own Nats-Request-Info is
    replaced)."""
    c = await nats.connect(url.replace("//", "//c:c@"))
    b = await nats.connect(url.replace("//", "//b:b@"))
    try:
        async def service(msg: nats.aio.msg.Msg) -> None:
            info = (msg.headers or {}).get("Nats-Request-Info", "")
            await msg.respond(re.sub(r',"rtt":\d+', "", info).encode())

        await c.subscribe("q", cb=service)
        await flush_after_subs(c)
        plain = await b.request("ask", b"", timeout=5)
        forged = await b.request("ask", b"", timeout=5, headers={"Nats-Request-Info": '{"acc":"C"}'})
        return [plain.data, forged.data]
    finally:
        await c.close()
        await b.close()


@pytest.mark.parametrize("kind", ["appliance", "nats-server"])
def test_a_chain_of_service_imports(tmp_path: Path, kind: str) -> None:
    got = run_on(kind, tmp_path, CHAIN, chain_scenario)
    assert got == [b'{"acc":"B","svc":"A"}', b'{"acc":"B","svc":"A"}']
