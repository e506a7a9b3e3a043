"""Seeded random config texts judged by nats-server (`-t`) and by appliance.

1. Syntax: random token soup; the syntax verdicts agree.
2. Semantics: random known keys with values of every type; appliance never accepts a file that
   `nats-server -t` rejects. (The reverse is allowed and deliberate: appliance is stricter on port
   ranges, a negative max_payload, and `accounts` given a scalar, which nats-server ignores.)

The generator mixes the grammar's traps (separators, terminators, size suffixes, quotes, escapes,
comments, blocks, includes, variables, optional braces). Only the *syntax* verdict is compared:
nats-server's "Parse error", "config is invalid", variable and include errors against
`parse_text` raising. One divergence is deliberate: a key left without a value inside a map
(`{ a: 1, b }`) is a syntax error for appliance, while nats-server's parser mis-assigns the map
and then reports an unknown field — both reject the file.
"""

from __future__ import annotations

import concurrent.futures
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.config import options_from_text
from appliance.config.parser import parse_text
from appliance.errors import ConfigError

pytestmark = pytest.mark.integration

# the `nats_server` fixture of conftest.py: run nats-server ARGS with exactly ENV in a directory
RunServer = Callable[[list[str], dict[str, str], Path], "subprocess.CompletedProcess[str]"]

SEEDS = [1, 2, 3, 4]
TEXTS_PER_SEED = 40
PARALLEL_RUNS_MAX = 8  # concurrent `nats-server -t` processes
ATOMS = [
    "1", "42", "-7", "2m", "1k", "1kb", "1MiB", "1.5", "0.0.0.0:4222", "127.0.0.1", "30s", "true", "No", "abc",
    "a.b", "$X", "$2a$11$x", "'sq'", '"dq"', '"e\\tx"', "2021-01-01T00:00:00Z", "2021-01", "x\\ty", "1,", "-",
    "a'b", "nats://h:1", "(\nraw\n)", "1e", "9x", "a#b", "a//b", "[1]", "1]",
]
SEPARATORS = [": ", "=", " ", ":", " = ", "\t"]
ENDINGS = ["\n", "; ", ", ", " # c\n", " // c\n", "\n\n", "\r\n", ""]
KEYS = ["X", "a", "b_c", '"q k"', "'s'", "$SYS", "include", "k-1"]
SYNTAX_VERDICTS = ("Parse error on line", "config is invalid", "variable reference", "error parsing include")


class Generator:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def value(self, depth: int) -> str:
        roll = self.rnd.random()
        if depth < 2 and roll < 0.15:
            items = [self.value(depth + 1) + self.rnd.choice([", ", "\n", ",\n", " , "]) for _ in range(self.rnd.randint(0, 3))]
            return "[" + self.rnd.choice(["", " ", "\n"]) + "".join(items) + self.rnd.choice(["", " ", "\n"]) + "]"
        if depth < 2 and roll < 0.3:
            return "{" + self.rnd.choice(["", " ", "\n"]) + self.entries(depth + 1) + self.rnd.choice(["", " ", "\n"]) + "}"
        return self.rnd.choice(ATOMS)

    def entries(self, depth: int) -> str:
        out = []
        for _ in range(self.rnd.randint(0, 3)):
            key = self.rnd.choice(KEYS)
            if key == "include":
                out.append("include inc.conf" + self.rnd.choice(ENDINGS))
            else:
                out.append(key + self.rnd.choice(SEPARATORS) + self.value(depth) + self.rnd.choice(ENDINGS))
        return "".join(out)

    def text(self) -> str:
        text = self.entries(0)
        if self.rnd.random() < 0.2:
            text = "{" + text + "}"
        if self.rnd.random() < 0.1:
            text += self.rnd.choice(["}", "{", "]", "//", "#"])
        return text


@pytest.mark.parametrize("seed", SEEDS)
def test_random_texts_get_the_same_syntax_verdict(nats_server: RunServer, tmp_path: Path, seed: int) -> None:
    generator = Generator(seed)
    texts = [generator.text() for _ in range(TEXTS_PER_SEED)]
    env = {"X": "5"}

    def judge(index: int) -> subprocess.CompletedProcess[str]:
        directory = tmp_path / str(index)
        directory.mkdir()
        (directory / "inc.conf").write_text("inc_key: 1\n")
        (directory / "c.conf").write_text(texts[index])
        return nats_server(["-t", "-c", "c.conf"], env, directory)

    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL_RUNS_MAX) as pool:
        verdicts = list(pool.map(judge, range(len(texts))))
    disagreements = []
    for index, (text, real) in enumerate(zip(texts, verdicts, strict=True)):
        go_parses = not any(verdict in real.stderr for verdict in SYNTAX_VERDICTS)
        try:
            parse_text(text, filename=str(tmp_path / str(index) / "c.conf"), env=env)
            ours, why = True, ""
        except ConfigError as error:
            ours, why = False, error.problems[0]
        deliberate = not ours and "missing value for key" in why and real.returncode != 0
        if go_parses != ours and not deliberate:
            disagreements.append(f"#{index} {text!r}\n  nats-server: {real.stderr.strip()}\n  appliance: {why}")
    assert disagreements == []


SEMANTIC_SEEDS = [1, 2]
CONFIGS_PER_SEED = 60
VALUES = [
    "1", "0", "-1", "4222", "70000", "2m", "1GB", '"1G"', '"1X"', "1.5", "true", "off", '"30s"', "30s", '"abc"', "abc",
    "127.0.0.1:4222", '"127.0.0.1:4222"', '"a b"', "[a, b\n]", "[\n]", '"enabled"', "disabled", '"always"', "{}", '""',
]
TOP_KEYS = [
    "port", "host", "server_name", "max_payload", "ping_interval", "write_deadline", "debug", "server_tags", "http",
    "listen", "jetstream", "cluster", "authorization", "accounts", "no_auth_user", "max_connections", "pid_file",
    "client_advertise", "max_pending", "ping_max", "http_port", "logtime", "no_system_account", "store_dir",
]
BLOCK_KEYS = {
    "jetstream": ["store_dir", "max_mem", "max_file", "sync_interval", "strict", "domain", "enabled", "unique_tag"],
    "cluster": ["name", "listen", "port", "host", "routes", "pool_size", "no_advertise", "connect_retries",
                "ping_interval", "compression", "advertise", "accounts"],
    "authorization": ["user", "password", "token", "timeout", "users", "default_permissions"],
    "accounts": ["A", "B"],
}
USERS = [
    "[ {user: u, password: p} ]", '[ {user: u, permissions: {publish: "a.>"}} ]', "[ {password: p} ]",
    "[ {user: u, permissions: {publish: {allow: x, deny: [y]}, allow_responses: true}} ]", "{user: u}",
]
ACCOUNTS = ["{}", "{ users: [ {user: v} ] }", "{ jetstream: enabled }", "{ jetstream: { max_mem: 1G } }", "{ users: 1 }"]


class ConfigGenerator:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def block(self, key: str) -> str:
        lines = []
        for _ in range(self.rnd.randint(0, 3)):
            sub = self.rnd.choice(BLOCK_KEYS[key])
            if key == "accounts":
                value = self.rnd.choice(ACCOUNTS)
            elif sub == "users":
                value = self.rnd.choice(USERS)
            elif sub == "default_permissions":
                value = self.rnd.choice(['{publish: "x"}', "{publish: 1}"])
            else:
                value = self.rnd.choice(VALUES)
            lines.append(f"  {sub}: {value}")
        return "{\n" + "\n".join(lines) + "\n}"

    def text(self) -> str:
        keys = self.rnd.sample(TOP_KEYS, self.rnd.randint(1, 4))
        values = [self.block(k) if k in BLOCK_KEYS and self.rnd.random() < 0.8 else self.rnd.choice(VALUES) for k in keys]
        return "".join(f"{key}: {value}\n" for key, value in zip(keys, values, strict=True))


@pytest.mark.parametrize("seed", SEMANTIC_SEEDS)
def test_appliance_never_accepts_a_config_nats_server_t_rejects(nats_server: RunServer, tmp_path: Path, seed: int) -> None:
    generator = ConfigGenerator(seed)
    texts = [generator.text() for _ in range(CONFIGS_PER_SEED)]

    def judge(index: int) -> subprocess.CompletedProcess[str]:
        directory = tmp_path / str(index)
        directory.mkdir()
        (directory / "c.conf").write_text(texts[index])
        return nats_server(["-t", "-c", "c.conf"], {}, directory)

    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL_RUNS_MAX) as pool:
        verdicts = list(pool.map(judge, range(len(texts))))
    too_lenient = []
    for text, real in zip(texts, verdicts, strict=True):
        if real.returncode == 0:
            continue
        try:
            options_from_text(text, filename="c.conf", env={}, pedantic=True, validate=False)
        except ConfigError:
            continue
        too_lenient.append(f"{text!r}\n  nats-server: {real.stderr.strip()}")
    assert too_lenient == []
    assert sum(real.returncode != 0 for real in verdicts) > CONFIGS_PER_SEED // 2  # the generator finds errors
