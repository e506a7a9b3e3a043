"""`stream add` / `consumer add` ask natscli's questions on a terminal for what the flags left out
(click prompts, driven here by CliRunner input with the terminal check on, and once through a real
pty); without a terminal they keep the plain error (tests/cli/test_verbs_nats_server.py)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from appliance.cli import prompts
from appliance.cli.consumer_config import ConsumerFlags, consumer_config
from appliance.cli.consumer_questions import next_consumer_question
from appliance.cli.main import main
from appliance.cli.prompts import Question
from appliance.cli.stream_config import StreamFlags, new_stream_config
from appliance.cli.stream_questions import next_stream_question
from appliance.testing.natsserver import NatsServer

STREAM_QUESTIONS = [
    "Subjects", "Storage", "Replication", "Retention Policy", "Discard Policy", "Stream Messages Limit",
    "Per Subject Messages Limit", "Total Stream Size", "Message TTL", "Max Message Size",
    "Duplicate tracking time window", "Allow message Roll-ups", "Allow message deletion",
    "Allow purging subjects or the entire stream",
]


def scripted(answers: dict[str, str | bool], seen: list[str]) -> prompts.Ask:  # type: ignore[type-arg]
    """An asker that answers from `answers` (default when absent) and records the questions."""

    def ask(question: Question, flags: object) -> object:  # type: ignore[type-arg]
        seen.append(question.text)
        answer = answers.get(question.text, question.default)
        assert answer is not None, f"{question.text} has no default"
        return question.apply(flags, answer)

    return ask


def test_stream_questions_are_natscli_s_in_its_order_and_defaults_make_its_config() -> None:
    seen: list[str] = []
    flags = prompts.ask_missing(StreamFlags(replicas=1), next_stream_question,
                                scripted({"Subjects": "orders.> audit.orders"}, seen))
    assert seen == [q for q in STREAM_QUESTIONS if q != "Replication"]  # --replicas was given
    config = new_stream_config("ORDERS", flags, use_defaults=False)
    assert config == {"name": "ORDERS", "subjects": ["orders.>", "audit.orders"], "storage": "file",
                      "num_replicas": 1, "retention": "limits", "discard": "old", "max_msgs": -1,
                      "max_msgs_per_subject": -1, "max_bytes": -1, "max_age": 0, "max_msg_size": -1,
                      "duplicate_window": 120_000_000_000, "max_consumers": -1, "allow_rollup_hdrs": False,
                      "deny_delete": False, "deny_purge": False}


def test_stream_answers_are_read_as_natscli_reads_them() -> None:
    answers: dict[str, str | bool] = {
        "Subjects": "a,b", "Storage": "Memory", "Replication": "3", "Retention Policy": "work queue",
        "Discard Policy": "new", "Stream Messages Limit": "0", "Per Subject Messages Limit": "5",
        "Total Stream Size": "1GB", "Message TTL": "30s", "Max Message Size": "1K",
        "Allow message Roll-ups": True, "Allow message deletion": False,
        "Allow purging subjects or the entire stream": False,
    }
    flags = prompts.ask_missing(StreamFlags(), next_stream_question, scripted(answers, []))
    config = new_stream_config("S", flags, use_defaults=False)
    assert {k: config[k] for k in ("storage", "num_replicas", "retention", "discard", "max_msgs",
                                   "max_msgs_per_subject", "max_bytes", "max_age", "max_msg_size",
                                   "duplicate_window", "allow_rollup_hdrs", "deny_delete", "deny_purge")} == {
        "storage": "memory", "num_replicas": 3, "retention": "workqueue", "discard": "new", "max_msgs": -1,
        "max_msgs_per_subject": 5, "max_bytes": 1 << 30, "max_age": 30_000_000_000, "max_msg_size": 1024,
        "duplicate_window": 30_000_000_000,  # natscli: the TTL when it is shorter than 2m
        "allow_rollup_hdrs": True, "deny_delete": True, "deny_purge": True}


def test_consumer_questions_follow_the_kind_and_the_ack_policy() -> None:
    seen: list[str] = []
    flags = prompts.ask_missing(ConsumerFlags(), next_consumer_question, scripted({}, seen))
    assert seen == ["Delivery target (empty for Pull Consumers)",
                    "Start policy (all, new, last, subject, 1h, msg sequence)", "Acknowledgment policy",
                    "Replay policy", "Filter Stream by subjects (blank for all)", "Maximum Allowed Deliveries",
                    "Maximum Acknowledgments Pending", "Deliver headers only without bodies"]
    assert consumer_config("C", flags, use_defaults=False) == {
        "name": "C", "durable_name": "C", "deliver_policy": "all", "ack_policy": "explicit",
        "replay_policy": "instant"}

    seen = []
    answers: dict[str, str | bool] = {"Delivery target (empty for Pull Consumers)": "out.x",
                                      "Start policy (all, new, last, subject, 1h, msg sequence)": "42",
                                      "Filter Stream by subjects (blank for all)": "orders.new orders.old",
                                      "Idle Heartbeat": "5s", "Enable Flow Control, ie --flow-control": True}
    flags = prompts.ask_missing(ConsumerFlags(), next_consumer_question, scripted(answers, seen))
    assert "Maximum Allowed Deliveries" not in seen  # push defaults to ack none: no redeliveries to bound
    assert consumer_config("P", flags, use_defaults=False) == {
        "name": "P", "durable_name": "P", "deliver_policy": "by_start_sequence", "opt_start_seq": 42,
        "ack_policy": "none", "replay_policy": "instant", "deliver_subject": "out.x",
        "filter_subjects": ["orders.new", "orders.old"], "flow_control": True, "idle_heartbeat": 5_000_000_000}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with NatsServer(["-js", "-sd", str(tmp_path_factory.mktemp("js"))]) as running:
        yield running


def on_a_terminal(server: NatsServer, monkeypatch: pytest.MonkeyPatch, args: list[str], lines: list[str]) -> Result:
    monkeypatch.setattr(prompts, "on_terminal", lambda: True)
    return CliRunner().invoke(main, [*args, "-s", server.url, "--timeout", "10", "--json"],
                              input="".join(f"{line}\n" for line in lines), catch_exceptions=False)


@pytest.mark.integration
def test_stream_add_on_a_terminal_asks_and_creates(server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Subjects, Storage (a bad answer first), then Enter for every default but the TTL and roll-ups
    lines = ["orders.>", "disk", "memory", "", "", "", "", "", "1h", "", "", "y", "", ""]
    result = on_a_terminal(server, monkeypatch, ["stream", "add", "ORDERS", "--replicas", "1"], lines)
    assert result.exit_code == 0, result.output
    assert "Storage (file, memory) [file]: " in result.output
    assert "Error: 'disk' is not one of file, memory" in result.output
    assert "Message TTL [-1]: " in result.output and "Allow message Roll-ups [y/N]: " in result.output
    info = json.loads(result.output[result.output.index("{"):])
    config = info["config"]
    assert (config["subjects"], config["storage"], config["max_age"], config["allow_rollup_hdrs"]) == (
        ["orders.>"], "memory", 3_600_000_000_000, True)

    result = on_a_terminal(server, monkeypatch, ["consumer", "add", "ORDERS", "NEW", "--filter", "orders.new"],
                           ["", "", "", "", "5", "", ""])
    assert result.exit_code == 0, result.output
    assert "Acknowledgment policy (explicit, all, none) [explicit]: " in result.output
    config = json.loads(result.output[result.output.index("{"):])["config"]
    assert (config["ack_policy"], config["max_deliver"], config["filter_subject"]) == ("explicit", 5, "orders.new")


@pytest.mark.integration
def test_stream_add_through_a_real_pty(server: NatsServer) -> None:
    """The real terminal check: stdin is a pty, nothing is patched."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "stream", "add", "PTY", "--subjects", "pty.>",
                             "--storage", "file", "-s", server.url, "--timeout", "10"],
                            stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"was created" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                break  # the child closed the pty
            seen += chunk
            if chunk.rstrip().endswith((b"]:", b":")):
                os.write(primary, b"\n")  # every default
        assert proc.wait(10) == 0, seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    text = seen.decode(errors="replace")
    assert "Replication [1]: " in text and "Allow purging subjects or the entire stream [Y/n]: " in text
    assert "Stream PTY was created" in text
