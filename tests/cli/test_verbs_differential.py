"""The same verb script against `appliance run` and the real nats-server 2.15.1: same text out.

Only what the wall clock decides is masked (times, dates, durations, round trips, the
server version). Everything else (configuration echo, state counts, errors with their
err_code, sequence numbers in `consumer next`) must be equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli.main import main
from appliance.testing.natsserver import NatsServer
from appliance.testing.process import ApplianceProcess, free_port

pytestmark = pytest.mark.integration

SCRIPT: list[list[str]] = [
    [
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
        "--dupe-window",
        "1m",
        "--max-msgs-per-subject",
        "10",
    ],
    ["stream", "add", "ORDERS", "--subjects", "orders.>", "--defaults"],
    ["stream", "add", "R3", "--subjects", "r3", "--defaults", "--replicas", "3"],
    ["pub", "orders.new", "first", "-J"],  # -J: stored in order (awaited PubAcks)
    ["pub", "orders.new", "n{{.Count}}", "--count", "3", "-H", "X-Trace:7", "-J"],
    ["pub", "orders.old", "x", "-J"],
    ["stream", "info", "ORDERS"],
    ["stream", "get", "ORDERS", "2"],
    ["stream", "get", "ORDERS", "--last-for", "orders.old"],
    ["stream", "get", "ORDERS", "99"],
    ["stream", "view", "ORDERS", "--count", "3"],
    ["consumer", "add", "ORDERS", "NEW", "--pull", "--ack", "explicit", "--filter", "orders.new"],
    ["consumer", "next", "ORDERS", "NEW", "--count", "2"],
    ["consumer", "info", "ORDERS", "NEW"],
    ["consumer", "ls", "ORDERS", "--names"],
    ["consumer", "info", "ORDERS", "NOPE"],
    ["stream", "edit", "ORDERS", "--max-msgs", "100"],
    ["stream", "edit", "ORDERS", "--storage", "memory"],
    ["stream", "purge", "ORDERS", "-f", "--subject", "orders.new", "--keep", "1"],
    ["stream", "ls", "--names"],
    ["stream", "cluster", "step-down", "ORDERS"],
    ["stream", "cluster", "peer-remove", "ORDERS", "n4-c1"],
    [
        "consumer",
        "add",
        "ORDERS",
        "PUSH",
        "--deliver",
        "out.push",
        "--ack",
        "none",
        "--deliver-policy",
        "new",
    ],
    ["consumer", "ls", "ORDERS"],
    ["consumer", "next", "ORDERS", "PUSH"],
    ["req", "$JS.API.INFO", "", "--raw"],
    ["server", "ls"],
    ["consumer", "rm", "ORDERS", "NEW", "-f"],
    ["stream", "rm", "ORDERS", "-f"],
    ["stream", "info", "ORDERS"],
]

MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<clock>"),
    (re.compile(r"\(\d+(\.\d+)?(ns|µs|ms|s)\)|\d+\.\d\ds ago|\d+(\.\d+)?(ns|µs|ms) ago"), "<since>"),
    (re.compile(r"Host Version: \S+"), "Host Version: <version>"),
]


TABLE_DURATION = re.compile(r"│ \d+(\.\d+)?(ns|µs|ms|s|m\d+s) +│$", re.MULTILINE)


def masked(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    text = TABLE_DURATION.sub("│ <since> │", text)  # "Last Delivery" / "Last Message" columns
    lines = [
        re.sub(" +", " ", re.sub("─+", "─", line)) if line[:1] in "╭│├╰" and line else line
        for line in text.split("\n")
    ]
    return "\n".join(lines)  # cell widths follow the masked values, so table padding is dropped


def transcript(url: str) -> str:
    parts = []
    for args in SCRIPT:
        result = CliRunner().invoke(main, [*args, "-s", url, "--timeout", "10"], catch_exceptions=False)
        parts.append(f"$ {' '.join(args)}\n[exit {result.exit_code}]\n{result.stdout}{result.stderr}")
    return masked("\n".join(parts))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with NatsServer(["-js", "-sd", str(tmp_path_factory.mktemp("nats"))]) as server:
        yield transcript(server.url)


def test_appliance_answers_every_verb_as_nats_server(reference: str, tmp_path: Path) -> None:
    port = free_port()
    args = ["-js", "-sd", str(tmp_path / "store"), "-a", "127.0.0.1", "-p", str(port)]
    with ApplianceProcess(args, log_dir=tmp_path):
        ours = transcript(f"nats://127.0.0.1:{port}")
    assert ours == reference
