"""The real `appliance run` process against the real nats-server 2.15.1, same config, same workload:
/varz, /connz, /subsz, /jsz and /healthz must have the same keys and JSON types, and the same
values where a client or operator relies on them (counts, subjects, the config echoed back).

Workload (one nats-py client "holder"): SUB foo.>, SUB bar in queue group q1, a file stream
ORDERS on orders.> with 10 messages of 100 B on 3 subjects, a durable explicit-ack consumer C1,
5 PUBs to bar; the pages are read while the client is connected. Identity, ports, times and the
random _INBOX prefix are masked. Known differences, asserted so they stay known:
  - both list their internal subscriptions in /subsz and count them in `subscriptions`, but
    they have different ones: nats-server's system account services and one `$JS.API.>`,
    appliance's JetStream API by subject family (fewer: KNOWN_SUBSCRIPTION_GAP); appliance shows
    an internal subscription with cid 0, nats-server with its internal client's cid (1, 2, 3);
  - /varz `git_commit` (appliance has no Go build), `jetstream.config.compress_ok` (appliance
    offers no s2 stream compression), Go runtime internals (`feature_flags`, `disk_io_wait_stats`);
  - /subsz sublist cache figures and /connz `rtt` are implementation and timing details.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.testing.json_shape import shape
from appliance.testing.natsserver import nats_server_binary
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 30.0
CONFIG = """server_name: MON1
listen: 127.0.0.1:{client}
http: 127.0.0.1:{http}
max_payload: 512KB
max_connections: 100
ping_interval: "1m"
jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 1GB }}
"""
JSZ = "/jsz?accounts=true&streams=true&consumers=true&config=true"
PAGES = ["/varz", "/connz?subs=detail", "/subsz?subs=1", "/subsz?subs=1&test=bar", JSZ, "/healthz",
         "/healthz?js-enabled-only=true"]
# not comparable: Go internals, values appliance does not have (see the module docstring)
NOT_COMPARED = {
    "/varz": ["feature_flags", "disk_io_wait_stats", "git_commit", "jetstream.config.compress_ok"],
    JSZ: ["config.compress_ok"],
}
MASKED = {"server_id", "now", "start", "config_load_time", "last_activity", "created", "ts", "first_ts", "last_ts",
          "cid", "port", "http_port", "rtt", "uptime", "store_dir", "mem", "cpu", "config_digest"}
INBOX = re.compile(r"_INBOX\.[A-Za-z0-9]+\.")
VARZ_SAME = ["server_name", "version", "proto", "host", "max_payload", "max_connections", "ping_interval", "ping_max",
             "max_control_line", "max_pending", "auth_timeout", "write_deadline", "tls_timeout", "connections",
             "total_connections", "routes", "remotes", "leafnodes", "in_msgs", "out_msgs", "in_bytes",
             "slow_consumers", "cores", "jetstream", "system_account", "cluster", "gateway", "leaf", "mqtt",
             "websocket", "slow_consumer_stats", "stale_connection_stats"]
CONNECTION_SAME = ["kind", "type", "ip", "pending_bytes", "in_msgs", "out_msgs", "in_bytes",
                   "subscriptions", "name", "lang", "version", "subscriptions_list_detail"]
# out_bytes: the API replies carry RFC 3339 times with trailing zeros of the nanoseconds trimmed (as Go
# writes them), so their length, and the bytes sent, vary by a few bytes from run to run on either server
TIMESTAMP_BYTES_SLACK = 3 * 9  # three times in the replies (stream created, consumer created and ts)
KNOWN_SUBSCRIPTION_GAP = ("subscriptions",)  # /varz: nats-server counts its internal subscriptions

Pages = dict[str, tuple[int, Any]]


def fetch(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as problem:
        return problem.code, json.loads(problem.read())


async def workload_then_pages(client_port: int, http_port: int) -> Pages:
    import nats

    client = await nats.connect(f"nats://127.0.0.1:{client_port}", name="holder")
    try:
        js = client.jetstream()
        await client.subscribe("foo.>")
        await client.subscribe("bar", queue="q1")
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for n in range(10):
            await js.publish(f"orders.{n % 3}", b"x" * 100)
        await js.add_consumer("ORDERS", durable_name="C1", ack_policy="explicit")
        for _ in range(5):
            await client.publish("bar", b"hello")
        await client.flush()
        return {path: await asyncio.to_thread(fetch, http_port, path) for path in PAGES}
    finally:
        await client.close()


def write_config(folder: Path) -> tuple[Path, int, int]:
    client_port, http_port = free_port(), free_port()
    config = folder / "server.conf"
    config.write_text(CONFIG.format(client=client_port, http=http_port, store=folder / "store"))
    return config, client_port, http_port


def nats_server_pages(folder: Path) -> Pages:
    config, client_port, http_port = write_config(folder)
    with open(folder / "nats.log", "wb") as log:
        process = subprocess.Popen([nats_server_binary(), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if fetch(http_port, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (folder / "nats.log").read_text()
            time.sleep(0.05)  # polling a process we started, bounded by the deadline
        return asyncio.run(workload_then_pages(client_port, http_port))
    finally:
        process.terminate()
        process.wait(15)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Pages]]:
    real = nats_server_pages(tmp_path_factory.mktemp("nats"))
    folder = tmp_path_factory.mktemp("appliance")
    config, client_port, http_port = write_config(folder)
    with ApplianceProcess(["-c", str(config)], log_dir=folder):
        ours = asyncio.run(workload_then_pages(client_port, http_port))
    yield {"nats": real, "appliance": ours}


def drop(page: Any, dotted: list[str]) -> Any:
    """A copy of `page` without the keys at these dotted paths."""
    out = copy.deepcopy(page)
    for path in dotted:
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = node.get(key, {})
        node.pop(last, None)
    return out


def masked(value: Any) -> Any:
    """Identity, ports, times and the random inbox prefix replaced by placeholders."""
    if isinstance(value, dict):
        return {k: "<masked>" if k in MASKED else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return INBOX.sub("_INBOX.<inbox>.", value)
    return value


@pytest.mark.parametrize("path", PAGES)
def test_same_status_keys_and_types(pages: dict[str, Pages], path: str) -> None:
    (real_status, real), (our_status, ours) = pages["nats"][path], pages["appliance"][path]
    assert our_status == real_status
    skip = NOT_COMPARED.get(path, [])
    assert shape(drop(ours, skip)) == shape(drop(real, skip))


def test_varz_counts_and_config_echo_agree(pages: dict[str, Pages]) -> None:
    real, ours = (masked(drop(pages[k]["/varz"][1], NOT_COMPARED["/varz"])) for k in ("nats", "appliance"))
    assert {k: ours.get(k) for k in VARZ_SAME} == {k: real.get(k) for k in VARZ_SAME}
    assert (real["connections"], real["in_msgs"], real["max_payload"]) == (1, 17, 512 * 1024)  # the workload's
    assert abs(ours["out_bytes"] - real["out_bytes"]) <= TIMESTAMP_BYTES_SLACK
    for key in KNOWN_SUBSCRIPTION_GAP:
        assert ours[key] < real[key]  # nats-server also counts its internal subscriptions


def test_connz_of_the_client_agrees(pages: dict[str, Pages]) -> None:
    real, ours = (masked(pages[k]["/connz?subs=detail"][1]) for k in ("nats", "appliance"))
    assert (ours["num_connections"], ours["total"]) == (real["num_connections"], real["total"]) == (1, 1)
    mine, theirs = (by_subject(c["connections"][0]) for c in (ours, real))
    assert {k: mine.get(k) for k in CONNECTION_SAME} == {k: theirs.get(k) for k in CONNECTION_SAME}
    assert abs(mine["out_bytes"] - theirs["out_bytes"]) <= TIMESTAMP_BYTES_SLACK
    assert [s["subject"] for s in theirs["subscriptions_list_detail"]] == ["_INBOX.<inbox>.*", "bar", "foo.>"]


def by_subject(connection: dict[str, Any]) -> dict[str, Any]:
    """The connection with its subscription list by subject (nats-server walks a Go map: any order)."""
    listed = sorted(connection["subscriptions_list_detail"], key=lambda s: s["subject"])
    return connection | {"subscriptions_list_detail": listed}


def client_subscriptions(subsz: dict[str, Any]) -> list[dict[str, Any]]:
    """The holder's subscriptions of a /subsz list (the client's cid owns `bar`), by subject (the
    list's order is the sublist's walk, not a contract)."""
    listed = subsz["subscriptions_list"]
    holder = next(s["cid"] for s in listed if s["subject"] == "bar")
    return sorted((masked(s) for s in listed if s["cid"] == holder), key=lambda s: s["subject"])


def test_subsz_lists_the_client_subscriptions_alike(pages: dict[str, Pages]) -> None:
    real, ours = (pages[k]["/subsz?subs=1"][1] for k in ("nats", "appliance"))
    assert client_subscriptions(ours) == client_subscriptions(real)
    real_bar, our_bar = (pages[k]["/subsz?subs=1&test=bar"][1] for k in ("nats", "appliance"))
    assert (our_bar["total"], masked(our_bar["subscriptions_list"])) == (
        real_bar["total"], masked(real_bar["subscriptions_list"]))
    assert [s["qgroup"] for s in our_bar["subscriptions_list"]] == ["q1"]


def test_jsz_totals_streams_consumers_and_config_agree(pages: dict[str, Pages]) -> None:
    real, ours = (masked(drop(pages[k][JSZ][1], NOT_COMPARED[JSZ])) for k in ("nats", "appliance"))
    assert ours == real
    assert (real["streams"], real["consumers"], real["messages"]) == (1, 1, 10)
    stream = real["account_details"][0]["stream_detail"][0]
    assert (stream["config"]["subjects"], stream["state"]["num_subjects"]) == (["orders.>"], 3)
    assert re.search(r"/appliance\d+/store/jetstream$", pages["appliance"][JSZ][1]["config"]["store_dir"])


@pytest.mark.parametrize("path", ["/healthz", "/healthz?js-enabled-only=true"])
def test_healthz_agrees(pages: dict[str, Pages], path: str) -> None:
    assert pages["appliance"][path] == pages["nats"][path] == (200, {"status": "ok"})


def test_subscription_counts_agree_with_the_lists(pages: dict[str, Pages]) -> None:
    """Each server's /subsz lists every subscription its counts count, internal ones included
    (appliance used to count its internal clients' subscriptions without listing them)."""
    for server in ("nats", "appliance"):
        subsz, varz = pages[server]["/subsz?subs=1"][1], pages[server]["/varz"][1]
        assert subsz["total"] == subsz["num_subscriptions"] == varz["subscriptions"], server
        listed = [s["subject"] for s in subsz["subscriptions_list"]]
        assert any(s.startswith("$JS.API.") for s in listed), server  # the JetStream API's own
