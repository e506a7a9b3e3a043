"""Cluster verbs against a real 3-node nats-server 2.15.1 cluster (C1: n1-c1..n3-c1) with a $SYS user.

The tests run in file order on one cluster: stream info with its Cluster Information block,
stream step-down, stream peer-remove (an R2 stream, so a spare server exists), server ls, meta
step-down, and last the eviction of a server from the meta group.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NAMES = ["n1-c1", "n2-c1", "n3-c1"]
APP = ["--user", "app", "--password", "app"]
SYS = ["--user", "sys", "--password", "sys"]
CLOCK = re.compile(r"^\d\d:\d\d:\d\d ", re.MULTILINE)
READY_TIMEOUT_S = 60.0
REPLICA = re.compile(
    r"^ +Replica: (n\d-c1), (current|outdated), (?:OFFLINE, )?(seen \d+\.\d\ds ago|not seen)"
    r"(?:, [\d,]+ operations? behind)?$",
    re.MULTILINE,
)


def node_config(name: str, store: Path, route_ports: list[int], own_route_port: int) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
    return f"""
server_name: {name}
jetstream {{ store_dir: "{store}" }}
accounts {{
  SYS: {{ users: [{{user: sys, password: sys}}] }}
  APP: {{ jetstream: enabled, users: [{{user: app, password: app}}] }}
}}
system_account: SYS
cluster {{ name: C1, listen: 127.0.0.1:{own_route_port}, routes: [{routes}] }}
"""


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("cluster")
    route_ports = [free_port() for _ in NAMES]
    with ExitStack() as stack:
        servers = []
        for name, route_port in zip(NAMES, route_ports, strict=True):
            config = base / f"{name}.conf"
            config.write_text(node_config(name, base / name, route_ports, route_port))
            servers.append(
                stack.enter_context(NatsServer(["-c", str(config)], log_path=base / f"{name}.log"))
            )
        yield ",".join(server.url for server in servers)


def cli(urls: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-s", urls, "--timeout", "10"], catch_exceptions=False)


def ok(urls: str, *args: str) -> str:
    result = cli(urls, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def eventually(urls: str, *args: str, condition: str = "") -> str:
    """Repeat a verb until it succeeds (and its output contains `condition`): the cluster settles."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        result = cli(urls, *args)
        if result.exit_code == 0 and condition in result.stdout:
            return result.stdout
        assert time.monotonic() < deadline, result.output
        time.sleep(0.2)


def test_r3_stream_info_shows_the_cluster_block(urls: str) -> None:
    out = eventually(
        urls,
        "stream",
        "add",
        "ORDERS",
        "--subjects",
        "orders.>",
        "--replicas",
        "3",
        "--storage",
        "file",
        *APP,
    )
    assert out.startswith("Stream ORDERS was created\n\nInformation for Stream ORDERS created ")
    out = eventually(urls, "stream", "info", "ORDERS", *APP, condition="current, seen")
    assert "                Replicas: 3\n" in out
    block = out[out.index("Cluster Information:\n") : out.index("State:\n")]
    leader = re.search(r"^ +Leader: (n\d-c1)$", block, re.MULTILINE)
    assert leader is not None, block
    assert "                    Name: C1\n" in block
    replicas = REPLICA.findall(block)
    assert sorted([leader.group(1), *(name for name, _, _ in replicas)]) == NAMES, block


def test_stream_step_down_elects_another_leader(urls: str) -> None:
    before = json.loads(ok(urls, "stream", "info", "ORDERS", "--json", *APP))["cluster"]["leader"]
    out = CLOCK.sub("", ok(urls, "stream", "cluster", "step-down", "ORDERS", *APP))
    lines = out.splitlines()
    assert lines[0] == f'Requesting leader step down of "{before}" in a 3 peer RAFT group'
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert elected is not None and elected.group(1) != before, out
    assert "Information for Stream ORDERS created " in out
    assert f"                  Leader: {elected.group(1)}\n" in out


def test_stream_step_down_to_a_preferred_server(urls: str) -> None:
    info = json.loads(
        eventually(urls, "stream", "info", "ORDERS", "--json", *APP, condition='"current": true')
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(replica.get("current") for replica in info["cluster"].get("replicas", [])):
        assert time.monotonic() < deadline, info
        time.sleep(0.2)
        info = json.loads(ok(urls, "stream", "info", "ORDERS", "--json", *APP))
    preferred = info["cluster"]["replicas"][-1]["name"]
    out = CLOCK.sub("", ok(urls, "stream", "cluster", "step-down", "ORDERS", "--preferred", preferred, *APP))
    assert f'New leader elected "{preferred}"\n' in out, out


def test_consumer_step_down_elects_another_leader(urls: str) -> None:
    eventually(urls, "consumer", "add", "ORDERS", "WORKER", "--pull", "--defaults", *APP)
    info = json.loads(
        eventually(urls, "consumer", "info", "ORDERS", "WORKER", "--json", *APP, condition='"current": true')
    )
    before = info["cluster"]["leader"]
    out = CLOCK.sub("", ok(urls, "consumer", "cluster", "step-down", "ORDERS", "WORKER", *APP))
    assert out.splitlines()[0] == f'Requesting leader step down of "{before}" in a 3 peer RAFT group'
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert elected is not None and elected.group(1) != before, out
    assert "Information for Consumer ORDERS > WORKER created " in out
    assert f"                  Leader: {elected.group(1)}\n" in out, out


def test_stream_peer_remove_replaces_the_peer(urls: str) -> None:
    eventually(urls, "stream", "add", "PAIR", "--subjects", "pair", "--replicas", "2", "--defaults", *APP)
    info = json.loads(eventually(urls, "stream", "info", "PAIR", "--json", *APP, condition='"current": true'))
    follower = info["cluster"]["replicas"][0]["name"]
    out = CLOCK.sub("", ok(urls, "stream", "cluster", "peer-remove", "PAIR", follower, *APP))
    assert out == f'Removing peer "{follower}"\nRequested removal of peer "{follower}"\n'
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        cluster = json.loads(ok(urls, "stream", "info", "PAIR", "--json", *APP))["cluster"]
        members = [cluster.get("leader", ""), *(replica["name"] for replica in cluster.get("replicas", []))]
        if follower not in members and len([name for name in members if name]) == 2:
            break
        assert time.monotonic() < deadline, cluster
        time.sleep(0.2)
    result = cli(urls, "stream", "cluster", "peer-remove", "ORDERS", "n9-c1", *APP)
    assert result.exit_code == 1 and result.stderr == "nats: error: peer not a member (10040)\n"


def test_stream_peer_remove_without_a_peer_lists_or_asks(urls: str, monkeypatch: pytest.MonkeyPatch) -> None:
    info = json.loads(eventually(urls, "stream", "info", "PAIR", "--json", *APP, condition='"current": true'))
    members = sorted([info["cluster"]["leader"], *(r["name"] for r in info["cluster"]["replicas"])])
    result = cli(urls, "stream", "cluster", "peer-remove", "PAIR", *APP)  # stdin is not a terminal
    assert result.exit_code == 1
    assert result.stderr == (f"nats: error: a peer is required (not a terminal); the peers of stream PAIR: "
                             f"{', '.join(members)}\n")
    monkeypatch.setattr("appliance.cli.prompts.on_terminal", lambda: True)
    chosen = members[-1]
    result = CliRunner().invoke(main, ["stream", "cluster", "peer-remove", "PAIR", "-s", urls, "--timeout", "10",
                                       *APP], input=f"{chosen}\n", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"? Select a Peer ({', '.join(members)}): {chosen}\n" in result.stdout
    assert CLOCK.sub("", result.stdout).endswith(f'Removing peer "{chosen}"\nRequested removal of peer "{chosen}"\n')


def test_server_ls_lists_the_three_servers(urls: str) -> None:
    out = ok(urls, "server", "ls", "3", *SYS)
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if re.match(r"^│ n\d-c1 ", line)
    ]
    assert [row[0] for row in rows] == NAMES
    assert all(row[1] == "C1" and row[3] == "2.15.1" and row[4] == "yes" for row in rows)
    assert len({row[7] for row in rows}) == 1 and int(rows[0][7]) > 0  # every server has the same routes
    answers = json.loads(ok(urls, "server", "ls", "3", "--json", *SYS))
    assert sorted(answer["server"]["name"] for answer in answers) == NAMES
    result = cli(urls, "server", "ls", *APP)
    assert result.exit_code == 1 and "system privileges" in result.stderr


def test_server_report_jetstream_summarises_servers_and_the_meta_group(urls: str) -> None:
    out = ok(urls, "server", "report", "jetstream", "3", *SYS)
    summary, meta = out.split("\n\n", 1)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in summary.splitlines()
            if re.match(r"^│ n\d-c1", line)]
    assert sorted(row[0].rstrip("*") for row in rows) == NAMES
    assert [row[0].endswith("*") for row in rows].count(True) == 1  # the meta leader
    assert all(row[1] == "C1" for row in rows)
    assert sum(int(row[2]) for row in rows) >= 3  # ORDERS is R3: a replica on each server
    leader = next(row[0].rstrip("*") for row in rows if row[0].endswith("*"))
    assert "RAFT Meta Group Information - Lead cluster: C1" in meta
    members = [[cell.strip() for cell in line.split("│")[1:-1]] for line in meta.splitlines()
               if re.match(r"^│ n\d-c1 ", line)]
    assert [m[0] for m in members] == NAMES
    assert [m[0] for m in members if m[2] == "yes"] == [leader]
    assert all(re.fullmatch(r"[A-Za-z0-9]{8}", m[1]) and m[4] == "true" for m in members)
    leaders = ok(urls, "server", "report", "jetstream", "3", "--leaders", *SYS)
    assert "Stream Leaders" in leaders and "Consumer Leaders" in leaders
    result = cli(urls, "server", "report", "jetstream", *APP)
    assert result.exit_code == 1 and "system privileges" in result.stderr


def test_meta_step_down_then_evict_a_server(urls: str) -> None:
    out = CLOCK.sub("", ok(urls, "server", "raft", "step-down", *SYS))
    first = re.match(r'^Requesting leader step down of "(n\d-c1)" in a 3 peer RAFT group\n', out)
    elected = re.search(r'^New leader elected "(n\d-c1)"$', out, re.MULTILINE)
    assert first is not None and elected is not None, out
    assert elected.group(1) != first.group(1)

    victim = next(name for name in reversed(NAMES) if name != elected.group(1))
    out = CLOCK.sub("", ok(urls, "server", "raft", "peer-remove", victim, *SYS))
    assert out == f'Removing peer "{victim}"\nRequested removal of peer "{victim}"\n'
    result = cli(urls, "server", "raft", "peer-remove", "n9-c1", *SYS)
    assert result.exit_code == 1 and result.stderr == "nats: error: did not find a replica named n9-c1\n"


def test_a_wrong_password_is_one_error_line(urls: str) -> None:
    result = cli(urls, "stream", "ls", "--user", "app", "--password", "wrong")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"nats: error: could not connect to {urls}: ")
    assert "Authorization Violation" in result.stderr, result.stderr

