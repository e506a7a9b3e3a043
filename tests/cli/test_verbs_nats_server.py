"""The verbs end to end against the real nats-server 2.15.1 (one JetStream server for the module).

Through click's CliRunner in-process, except `sub`, which runs as a process so a publisher can
run meanwhile. Times in the output are masked where the wall clock shows.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from click.testing import CliRunner, Result

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer

pytestmark = pytest.mark.integration
CLOCK = re.compile(r"^\d\d:\d\d:\d\d ", re.MULTILINE)
TIMEOUT_S = 10  # only failures wait this long; generous for a loaded machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    store = tmp_path_factory.mktemp("js")
    with NatsServer(["-js", "-sd", str(store)]) as running:
        yield running


def cli(server: NatsServer, *args: str) -> Result:
    timeout = [] if "--timeout" in args else ["--timeout", str(TIMEOUT_S)]
    return CliRunner().invoke(main, [*args, "-s", server.url, *timeout], catch_exceptions=False)


def ok(server: NatsServer, *args: str) -> str:
    result = cli(server, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(server: NatsServer, *args: str) -> str:
    result = cli(server, *args)
    assert result.exit_code == 1, result.output
    assert result.stdout == "" or "nats: error:" not in result.stdout
    return result.stderr


def test_stream_add_prints_created_and_the_info_report(server: NatsServer) -> None:
    out = ok(
        server,
        "stream",
        "add",
        "ORDERS",
        "--subjects",
        "orders.>",
        "--storage",
        "file",
        "--replicas",
        "1",
        "--max-age",
        "1d",
        "--max-bytes",
        "1MB",
        "--dupe-window",
        "1m",
    )
    assert out.startswith("Stream ORDERS was created\n\nInformation for Stream ORDERS created ")
    for line in [
        "Configuration:",
        "                Subjects: orders.>",
        "                Replicas: 1",
        "                 Storage: File",
        "           Maximum Bytes: 1.0 MiB",
        "             Maximum Age: 1d0h0m0s",
        "        Duplicate Window: 1m0s",
        "State:",
        "                Messages: 0",
        "          First Sequence: 0",
    ]:
        assert line + "\n" in out
    assert "Cluster Information" not in out  # a standalone server has no cluster name


def test_stream_add_errors_are_nats_style_lines(server: NatsServer) -> None:
    assert (
        fails(server, "stream", "add", "X")
        == "nats: error: --subjects, --storage, --replicas required (or pass --defaults); "
        "not asking: stdin is not a terminal\n"
    )
    ok(server, "stream", "add", "DUP", "--subjects", "dup", "--defaults")
    assert (
        fails(server, "stream", "add", "DUP", "--subjects", "dup", "--defaults", "--max-msgs", "5")
        == "nats: error: stream name already in use with a different configuration (10058)\n"
    )
    assert (
        fails(server, "stream", "add", "R3", "--subjects", "r3", "--defaults", "--replicas", "3")
        == "nats: error: replicas > 1 not supported in non-clustered mode (10074)\n"
    )
    assert fails(server, "stream", "add", "BAD", "--defaults", "--max-age", "soon").startswith(
        "nats: error: --max-age: invalid duration 'soon'"
    )


def test_info_json_is_the_api_answer(server: NatsServer) -> None:
    ok(server, "stream", "add", "JSONS", "--subjects", "jsons.>", "--defaults")
    info = json.loads(ok(server, "stream", "info", "JSONS", "--json"))
    assert info["type"] == "io.nats.jetstream.api.v1.stream_info_response"
    assert info["config"]["subjects"] == ["jsons.>"]
    assert fails(server, "stream", "info", "NOPE") == "nats: error: stream not found (10059)\n"


def test_pub_get_and_view(server: NatsServer) -> None:
    ok(server, "stream", "add", "MSGS", "--subjects", "msgs.>", "--defaults")
    out = ok(server, "pub", "msgs.a", "hello")
    assert CLOCK.sub("", out) == 'Published 5 bytes to "msgs.a"\n'
    out = ok(server, "pub", "msgs.b", "n{{.Count}}", "--count", "3", "-H", "X-Trace:7")
    assert CLOCK.sub("", out) == 'Published 3 messages to "msgs.b"\n'
    out = ok(server, "pub", "msgs.c", "acked", "-J")
    assert CLOCK.sub("", out) == "Stored in Stream: MSGS Sequence: 5\n"

    out = ok(server, "stream", "get", "MSGS", "3")
    assert out.startswith("Item: MSGS#3 received ")
    assert out.endswith(" on Subject msgs.b\n\nHeaders:\n  X-Trace: 7\n\nn2\n\n\n")
    out = ok(server, "stream", "get", "MSGS", "--last-for", "msgs.a")
    assert out.startswith("Item: MSGS#1 ") and out.endswith("hello\n\n\n")
    assert fails(server, "stream", "get", "MSGS", "99") == "nats: error: no message found (10037)\n"
    assert json.loads(ok(server, "stream", "get", "MSGS", "1", "--json"))["message"]["data"] == "aGVsbG8="

    out = ok(server, "stream", "view", "MSGS", "--count", "10")
    assert re.findall(r"^\[(\d+)\] Subject: (\S+) ", out, re.MULTILINE) == [
        ("1", "msgs.a"),
        ("2", "msgs.b"),
        ("3", "msgs.b"),
        ("4", "msgs.b"),
        ("5", "msgs.c"),
    ]
    assert "  X-Trace: 7\nn1\n" in out
    assert out.rstrip().endswith("Reached apparent end of data")
    out = ok(server, "stream", "view", "MSGS", "--count", "2", "--subject", "msgs.b", "--id", "3")
    assert re.findall(r"^\[(\d+)\]", out, re.MULTILINE) == ["3", "4"]
    assert "Reached apparent end" not in out


def test_ls_table_names_and_json(server: NatsServer) -> None:
    ok(server, "stream", "add", "LS1", "--subjects", "ls1", "--defaults")
    table = ok(server, "stream", "ls")
    assert "│ Name " in table and "│ LS1 " in table and "Streams" in table.splitlines()[1]
    names = ok(server, "stream", "ls", "--names").split()
    assert "LS1" in names and names == sorted(names)
    infos = json.loads(ok(server, "stream", "ls", "--json"))
    assert "LS1" in [info["config"]["name"] for info in infos]
    assert json.loads(ok(server, "stream", "ls", "--names", "--json", "--subject", "ls1")) == ["LS1"]


def test_edit_changes_only_the_given_flags(server: NatsServer) -> None:
    ok(server, "stream", "add", "EDIT", "--subjects", "edit.>", "--defaults", "--max-msgs-per-subject", "3")
    out = ok(server, "stream", "edit", "EDIT", "--max-msgs", "100", "--description", "edited")
    assert out.startswith("Stream EDIT was updated\n\nInformation for Stream EDIT")
    assert "        Maximum Messages: 100\n" in out and "     Maximum Per Subject: 3\n" in out
    assert "Description: edited\n" in out
    assert (
        fails(server, "stream", "edit", "EDIT", "--storage", "memory")
        == "nats: error: stream configuration update can not change storage type (10052)\n"
    )
    assert fails(server, "stream", "edit", "EDIT").startswith("nats: error: nothing to change")


def test_purge_and_rm_need_force(server: NatsServer) -> None:
    ok(server, "stream", "add", "PURGE", "--subjects", "purge.>", "--defaults")
    for subject in ["purge.a", "purge.a", "purge.a", "purge.b"]:
        ok(server, "pub", subject, "x")
    assert "without --force" in fails(server, "stream", "purge", "PURGE")
    out = ok(server, "stream", "purge", "PURGE", "-f", "--subject", "purge.a", "--keep", "1")
    assert out.startswith("Purged 2 messages from PURGE\n\nState for Stream PURGE created ")
    assert "Messages: 2\n" in out
    assert json.loads(ok(server, "stream", "purge", "PURGE", "-f", "--json")) == {
        "type": "io.nats.jetstream.api.v1.stream_purge_response",
        "success": True,
        "purged": 2,
    }
    assert "keep cannot be combined" in fails(
        server, "stream", "purge", "PURGE", "-f", "--keep", "1", "--seq", "2"
    )

    assert "without --force" in fails(server, "stream", "rm", "PURGE")
    assert ok(server, "stream", "rm", "PURGE", "-f") == ""
    assert fails(server, "stream", "rm", "PURGE", "-f") == "nats: error: stream not found (10059)\n"


def test_cluster_verbs_on_a_standalone_server(server: NatsServer) -> None:
    ok(server, "stream", "add", "SOLO", "--subjects", "solo", "--defaults")
    assert (
        fails(server, "stream", "cluster", "step-down", "SOLO")
        == 'nats: error: stream "SOLO" is not clustered\n'
    )
    result = cli(server, "stream", "cluster", "peer-remove", "SOLO", "n4-c1")
    assert result.exit_code == 1
    assert CLOCK.sub("", result.stdout) == 'Removing peer "n4-c1"\n'
    assert result.stderr == "nats: error: JetStream clustering support required (10010)\n"


def test_consumer_add_info_ls_next_rm(server: NatsServer) -> None:
    ok(server, "stream", "add", "WORK", "--subjects", "work.>", "--defaults")
    for index in range(3):
        ok(server, "pub", "work.new", f"job {index}")
    out = ok(
        server,
        "consumer",
        "add",
        "WORK",
        "NEW",
        "--pull",
        "--ack",
        "explicit",
        "--filter",
        "work.new",
        "--max-deliver",
        "5",
        "--wait",
        "10s",
    )
    assert out.startswith("Information for Consumer WORK > NEW created ")
    for line in [
        "               Pull Mode: true",
        "          Filter Subject: work.new",
        "              Ack Policy: Explicit",
        "                Ack Wait: 10.00s",
        "      Maximum Deliveries: 5",
        "    Unprocessed Messages: 3",
    ]:
        assert line + "\n" in out

    out = ok(server, "consumer", "next", "WORK", "NEW", "--count", "2")
    headers = re.findall(r"^\[\d\d:\d\d:\d\d\] (.*)$", out, re.MULTILINE)
    assert headers == [
        "subj: work.new / tries: 1 / cons seq: 1 / str seq: 1 / pending: 2",
        "subj: work.new / tries: 1 / cons seq: 2 / str seq: 2 / pending: 1",
    ]
    assert out.count("\nAcknowledged message\n") == 2 and "\njob 0\n" in out
    out = ok(server, "consumer", "next", "WORK", "NEW", "--no-ack", "--raw")
    assert out == "job 2\n"

    info = json.loads(ok(server, "consumer", "info", "WORK", "NEW", "--json"))
    assert (info["ack_floor"]["stream_seq"], info["num_ack_pending"]) == (2, 1)
    out = ok(server, "consumer", "info", "WORK", "NEW")
    assert "  Acknowledgment Floor: Consumer sequence: 2 Stream sequence: 2 Last Ack: " in out
    assert "        Outstanding Acks: 1 out of maximum 1,000\n" in out

    assert fails(server, "consumer", "next", "WORK", "NEW", "--timeout", "1").startswith(
        "nats: error: no message received: 408"
    )
    assert "│ NEW " in ok(server, "consumer", "ls", "WORK")
    assert ok(server, "consumer", "ls", "WORK", "--names") == "NEW\n"
    assert "without --force" in fails(server, "consumer", "rm", "WORK", "NEW")
    assert ok(server, "consumer", "rm", "WORK", "NEW", "-f") == ""
    assert ok(server, "consumer", "ls", "WORK") == "No Consumers defined\n"
    assert fails(server, "consumer", "info", "WORK", "NEW") == "nats: error: consumer not found (10014)\n"


def test_push_consumer_and_defaults(server: NatsServer) -> None:
    ok(server, "stream", "add", "PUSH", "--subjects", "push.>", "--defaults")
    out = ok(
        server,
        "consumer",
        "add",
        "PUSH",
        "P",
        "--deliver",
        "out.p",
        "--ack",
        "none",
        "--deliver-policy",
        "new",
    )
    assert "        Delivery Subject: out.p\n" in out and "Deliver Policy: New\n" in out
    assert "Active Interest: No interest\n" in out
    assert fails(server, "consumer", "next", "PUSH", "P", "--timeout", "1").startswith("nats: error: ")
    out = ok(server, "consumer", "add", "PUSH", "D", "--defaults")
    assert "Pull Mode: true\n" in out and "Ack Policy: Explicit\n" in out
    assert (
        fails(server, "consumer", "add", "PUSH", "Q")
        == "nats: error: --pull or --deliver SUBJECT, --ack required (or pass --defaults); "
        "not asking: stdin is not a terminal\n"
    )


def test_req_answers_from_the_jetstream_api(server: NatsServer) -> None:
    out = ok(server, "req", "$JS.API.INFO", "")
    lines = CLOCK.sub("", out).splitlines()
    assert lines[0] == 'Sending request on "$JS.API.INFO"'
    assert lines[1].startswith("Received with rtt ")
    assert json.loads(lines[2])["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert json.loads(ok(server, "req", "$JS.API.INFO", "", "--raw"))["api"]["level"] >= 0
    assert (
        fails(server, "req", "nobody.listens", "x")
        == "nats: error: nats: no responders available for request\n"
    )


def test_system_verbs_need_a_system_user(server: NatsServer) -> None:
    assert "ensure the account used has system privileges" in fails(server, "server", "ls")
    assert "did not receive a response from the meta leader" in fails(server, "server", "raft", "step-down")


def test_unreachable_server_is_one_error_line() -> None:
    with NatsServer() as gone:
        url = gone.url
    result = CliRunner().invoke(main, ["stream", "ls", "-s", url, "--timeout", "1"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"nats: error: could not connect to {url}")


def test_sub_prints_messages_until_count(server: NatsServer, tmp_path: Path) -> None:
    out_path = tmp_path / "sub.out"
    with open(out_path, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "appliance",
                "sub",
                "greet.*",
                "--count",
                "2",
                "--timeout",
                "30",
                "-s",
                server.url,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "Subscribing on greet.*" not in out_path.read_text():
            assert process.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.02)
        ok(server, "pub", "greet.a", "one", "-H", "K:v")
        ok(server, "pub", "greet.b", "two", "--reply", "back")
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    text = CLOCK.sub("", out_path.read_text())
    assert text == (
        'Subscribing on greet.*\n[#1] Received on "greet.a"\nK: v\n\none\n\n\n'
        '[#2] Received on "greet.b" with reply "back"\ntwo\n\n\n'
    )


def test_sub_with_a_count_not_reached_in_time_fails(server: NatsServer) -> None:
    result = CliRunner().invoke(main, ["sub", "quiet", "--count", "1", "--timeout", "0.2", "-s", server.url])
    assert result.exit_code == 1
    assert result.stderr == "nats: error: received 0 of 1 messages before the timeout\n"
    result = CliRunner().invoke(main, ["sub", "quiet", "--timeout", "0.2", "-s", server.url])
    assert result.exit_code == 0 and CLOCK.sub("", result.stdout) == "Subscribing on quiet\n"


def test_listings_follow_every_page(tmp_path: Path) -> None:
    """STREAM.LIST pages hold 256 infos: 300 streams take two pages, NAMES one."""

    async def create_streams(url: str) -> None:
        client = await nats.connect(url)
        try:
            for index in range(300):
                body = {"name": f"P{index:03d}", "subjects": [f"p.{index}"], "storage": "memory"}
                await client.request(
                    f"$JS.API.STREAM.CREATE.P{index:03d}", json.dumps(body).encode(), timeout=5
                )
        finally:
            await client.close()

    with NatsServer(["-js", "-sd", str(tmp_path)]) as paged_server:
        asyncio.run(create_streams(paged_server.url))
        names = ok(paged_server, "stream", "ls", "--names").split()
        assert names == [f"P{index:03d}" for index in range(300)]
        infos = json.loads(ok(paged_server, "stream", "ls", "--json"))
        assert sorted(info["config"]["name"] for info in infos) == names
        assert ok(paged_server, "stream", "ls").count("│ P") == 300


def test_a_server_without_jetstream_says_so() -> None:
    with NatsServer() as plain:
        assert fails(plain, "stream", "ls") == (
            "nats: error: nats: no responders available for request ($JS.API.STREAM.LIST): "
            "is JetStream enabled?\n"
        )


def test_sub_in_a_queue_group(server: NatsServer) -> None:
    result = CliRunner().invoke(
        main, ["sub", "work.q", "--queue", "workers", "--timeout", "0.2", "-s", server.url]
    )
    assert result.exit_code == 0
    assert CLOCK.sub("", result.stdout) == "Subscribing on work.q in group workers\n"


@pytest.mark.parametrize("name", ["a.b", "all*", "x>", "has space", "a/b", "", "n" * 256])
def test_invalid_names_are_refused_before_any_request(name: str) -> None:
    result = CliRunner().invoke(main, ["stream", "info", name, "-s", "nats://127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"nats: error: invalid name {name!r}: names are 1-255 characters")
    result = CliRunner().invoke(main, ["consumer", "info", "OK", name, "-s", "nats://127.0.0.1:1"])
    assert result.stderr.startswith(f"nats: error: invalid name {name!r}")


def test_sub_ends_quietly_on_ctrl_c(server: NatsServer, tmp_path: Path) -> None:
    out_path = tmp_path / "sub.out"
    with open(out_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "appliance", "sub", "forever", "-s", server.url],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "Subscribing on forever" not in out_path.read_text():
            assert process.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert "Traceback" not in out_path.read_text()
