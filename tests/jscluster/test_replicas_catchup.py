"""R1 -> R3 of a stream holding tens of MB: the two new replicas fetch every stored message, and
meanwhile the stream keeps taking publishes. The joiners are learners until caught up (RAFT
group membership, cluster/group.py), so the stream's one voter commits alone; before, the first
joiner was a voter at once and the stream had no quorum while it fetched (bench/catchup.py
measured ~5 s of refused publishes for 256 MiB).

Not timed: once STREAM.INFO lists the new replicas outdated (fetching), both joiners' servers are
frozen (SIGSTOP of their process groups): a publish is then acknowledged only if the stream's
leader needs neither of them for a quorum (before the learners it waited for as long as they
were frozen). After SIGCONT the test polls until both replicas are current, publishing all the
while; every message acknowledged is stored once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import nats
import psutil
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from appliance.testing.process import ApplianceProcess
from tests.routes.conftest import Node

pytestmark = pytest.mark.timeout(240)

MSG_BYTES = 256 * 1024
FILL_MSGS = 384  # 96 MiB of incompressible payloads
PUBLISH_TIMEOUT_S = 5.0
FROZEN_PROBES = 5
CATCH_UP_DEADLINE_S = 150.0


async def stream_info(nc: nats.NATS) -> dict[str, object] | None:
    try:
        msg = await nc.request("$JS.API.STREAM.INFO.LC", b"", timeout=2)
    except (NatsTimeout, NoRespondersError):
        return None
    reply = json.loads(msg.data)
    return None if "error" in reply else reply  # type: ignore[no-any-return]


def replicas_of(info: dict[str, object] | None) -> list[dict[str, object]]:
    cluster = info.get("cluster") if info else None
    listed = cluster.get("replicas") if isinstance(cluster, dict) else None
    return listed if isinstance(listed, list) else []


def catching_up(info: dict[str, object] | None) -> bool:
    """A replica is listed and not current (a learner fetching, or a voter behind)."""
    return any(not r.get("current") for r in replicas_of(info))


def caught_up(info: dict[str, object] | None) -> bool:
    listed = replicas_of(info)
    return len(listed) == 2 and all(r.get("current") for r in listed)


def signal_node(node: Node, signum: int) -> None:
    """SIGSTOP/SIGCONT the node's supervisor and its workers (each worker runs in a process group
    of its own), by pid: processes this test started."""
    process = node.process
    assert isinstance(process, ApplianceProcess) and process.process is not None
    supervisor = psutil.Process(process.process.pid)
    for member in [supervisor, *supervisor.children(recursive=True)]:
        try:
            member.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def test_a_stream_raised_to_three_replicas_takes_publishes_while_they_catch_up(
        js_cluster: list[Node], tmp_path: Path) -> None:
    async def scenario() -> None:
        setup = await nats.connect(js_cluster[0].url)
        config: dict[str, object] = {"name": "LC", "subjects": ["lc.>"], "storage": "file", "num_replicas": 1}
        reply = json.loads((await setup.request("$JS.API.STREAM.CREATE.LC", json.dumps(config).encode(),
                                                timeout=10)).data)
        assert "error" not in reply, reply
        await setup.close()
        holder = next(node for node in js_cluster if node.name == reply["cluster"]["leader"])
        joiners = [node for node in js_cluster if node is not holder]
        nc = await nats.connect(holder.url, max_reconnect_attempts=-1)  # never through a frozen joiner
        js = nc.jetstream()
        for start in range(0, FILL_MSGS, 32):
            await asyncio.gather(*(js.publish("lc.fill", os.urandom(MSG_BYTES), timeout=30)
                                   for _ in range(start, min(start + 32, FILL_MSGS))))
        reply = json.loads((await nc.request("$JS.API.STREAM.UPDATE.LC",
                                              json.dumps({**config, "num_replicas": 3}).encode(), timeout=10)).data)
        assert "error" not in reply, reply

        deadline = time.monotonic() + CATCH_UP_DEADLINE_S
        while True:  # the joiners are members (listed), fetching (not current)
            listed = await stream_info(nc)
            if replicas_of(listed) and not any(r.get("current") for r in replicas_of(listed)):
                break
            assert time.monotonic() < deadline, f"the joiners never showed up: {listed}"
            await asyncio.sleep(0.05)
        for node in joiners:
            signal_node(node, signal.SIGSTOP)
        try:
            for n in range(FROZEN_PROBES):
                try:
                    ack = await js.publish("lc.frozen", b"%d" % n, timeout=PUBLISH_TIMEOUT_S)
                except NatsTimeout:
                    raise AssertionError(f"publish {n} not acknowledged within {PUBLISH_TIMEOUT_S}s while the "
                                         f"joiners were frozen mid catch-up (listed: {replicas_of(listed)})") from None
                assert ack.stream == "LC"
        finally:
            for node in joiners:
                signal_node(node, signal.SIGCONT)

        probes = during = 0
        slowest = 0.0
        seen_outdated: set[str] = set()
        while True:
            before = await stream_info(nc)
            if caught_up(before):
                break
            assert time.monotonic() < deadline, f"not caught up: {before}"
            seen_outdated |= {str(r["name"]) for r in replicas_of(before) if not r.get("current")}
            started = time.monotonic()
            try:
                ack = await js.publish("lc.probe", b"probe %d" % probes, timeout=PUBLISH_TIMEOUT_S)
            except NatsTimeout:
                raise AssertionError(f"publish {probes} not acknowledged within {PUBLISH_TIMEOUT_S}s "
                                     f"while the replicas caught up ({during} were before it); last info {before}")
            slowest = max(slowest, time.monotonic() - started)
            assert ack.stream == "LC"
            probes += 1
            if catching_up(before) and catching_up(await stream_info(nc)):
                during += 1
            await asyncio.sleep(0.05)
        final = await stream_info(nc)
        assert final is not None
        assert final["state"]["messages"] == FILL_MSGS + FROZEN_PROBES + probes  # type: ignore[index]
        print(f"{probes} publishes during the catch-up, {during} while a replica was outdated (before and after), "
              f"slowest {slowest:.2f}s; outdated replicas seen: {sorted(seen_outdated)}")
        await nc.close()

    asyncio.run(scenario())
