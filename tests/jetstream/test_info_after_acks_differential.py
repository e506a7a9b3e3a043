"""A CONSUMER.INFO asked right after acks sees them: the client acks four of ten fetched messages
without waiting and asks INFO at once — ack floor 4, 6 pending acks — on one server and across two
workers (the acks and the request cross the worker ring to the JetStream worker). nats-server 2.15.1
applies acks on its consumer's goroutine (an ack queue): nearly always before the INFO, not always
(seen: 1 round in 8 answered with the acks not yet applied); appliance answers INFO once the acks it
took are applied, so always. Both end in the same state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerInfo

from appliance.testing.process import ApplianceProcess, free_port
from .conftest import observe_with

pytestmark = pytest.mark.integration

ROUNDS = 8


async def acks_then_info(nc: nats.NATS) -> list[tuple[int, int, int]]:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="A", subjects=["a.>"])
    for i in range(40):
        await nc.publish(f"a.{i % 3}", b"m")
    await nc.flush()
    seen = []
    for r in range(ROUNDS):
        await js.add_consumer("A", durable_name=f"C{r}", ack_policy="explicit")
        sub = await js.pull_subscribe("a.>", durable=f"C{r}", stream="A")
        for msg in (await sub.fetch(10, timeout=10))[:4]:
            await msg.ack()  # no wait for anything
        seen.append(numbers(await js.consumer_info("A", f"C{r}")))
    return seen


def numbers(info: ConsumerInfo) -> tuple[int, int, int]:
    return (info.ack_floor.stream_seq, info.num_ack_pending, info.delivered.stream_seq)


async def settled(nc: nats.NATS) -> list[tuple[int, int, int]]:
    """Each round's numbers once its acks are applied (polled, bounded)."""
    js = nc.jetstream(timeout=10)
    seen = []
    for r in range(ROUNDS):
        for _ in range(200):
            last = numbers(await js.consumer_info("A", f"C{r}"))
            if last[0] == 4:
                break
            await asyncio.sleep(0.01)
        seen.append(last)
    return seen


def test_info_after_acks_sees_them_and_ends_as_on_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    observe_with(real_url, acks_then_info, 60)
    expected = observe_with(real_url, settled, 60)
    assert expected == [(4, 6, 10)] * ROUNDS
    assert observe_with(our_url, acks_then_info, 60) == expected
    assert observe_with(our_url, settled, 60) == expected


def test_info_after_acks_sees_them_across_workers(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "two.conf"
    config.write_text(f"listen: 127.0.0.1:{port}\nappliance {{ workers: 2 }}\n")
    with ApplianceProcess(["-c", str(config), "-js", "-sd", str(tmp_path / "store")], log_dir=tmp_path):
        seen = observe_with(f"nats://127.0.0.1:{port}", acks_then_info, 60)
    assert seen == [(4, 6, 10)] * ROUNDS
