"""Streaming read (offsets = stream sequences) and write of the `jetstream` format: availableNow
with maxMessagesPerTrigger, and a query that fails mid-batch then resumes from its checkpoint
with every message written exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

import nats  # noqa: E402
from nats.js.api import StreamConfig  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


async def _setup(url: str, source: str, sink: str, n: int, **sink_limits: object) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=source, subjects=[f"{source.lower()}.>"], allow_direct=True)
    await js.add_stream(name=sink, subjects=[f"{sink.lower()}.>"], allow_direct=True, **sink_limits)
    for i in range(n):
        await js.publish(f"{source.lower()}.{i % 3}", b"%d" % i)
    await nc.close()


async def _publish(url: str, source: str, first: int, n: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    for i in range(first, first + n):
        await js.publish(f"{source.lower()}.{i % 3}", b"%d" % i)
    await nc.close()


async def _sink_data(url: str, sink: str) -> list[bytes]:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    info = await js.stream_info(sink)
    out = [(await js.get_msg(sink, seq)).data for seq in range(info.state.first_seq, info.state.last_seq + 1)]
    await nc.close()
    return out  # type: ignore[return-value]


async def _lift_limit(url: str, sink: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    config: StreamConfig = (await js.stream_info(sink)).config
    config.max_msgs = -1
    await js.update_stream(config)
    await nc.close()


def run_query(spark, url: str, source: str, sink: str, checkpoint: Path, per_trigger: int):  # type: ignore[no-untyped-def]
    df = (spark.readStream.format("jetstream").option("url", url).option("stream", source)
          .option("maxMessagesPerTrigger", str(per_trigger)).load())
    out = df.selectExpr(f"concat('{sink.lower()}.', subject) AS subject", "data")
    query = (out.writeStream.format("jetstream").option("url", url).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    return query


def test_available_now_honours_max_messages_per_trigger(spark, appliance_url, tmp_path: Path) -> None:
    asyncio.run(_setup(appliance_url, "SIN", "SOUT", 100))
    query = run_query(spark, appliance_url, "SIN", "SOUT", tmp_path / "ck", 30)
    query.awaitTermination(240)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [30, 30, 30, 10]
    assert sorted(int(d) for d in asyncio.run(_sink_data(appliance_url, "SOUT"))) == list(range(100))


def test_a_failed_batch_resumes_from_the_checkpoint_exactly_once(spark, appliance_url, tmp_path: Path) -> None:
    asyncio.run(_setup(appliance_url, "XIN", "XOUT", 100, max_msgs=50, discard="new"))
    query = run_query(spark, appliance_url, "XIN", "XOUT", tmp_path / "ck", 30)
    with pytest.raises(Exception, match="maximum messages exceeded"):
        query.awaitTermination(240)  # the second batch fails after 20 of its 30 messages
    assert len(asyncio.run(_sink_data(appliance_url, "XOUT"))) == 50
    asyncio.run(_lift_limit(appliance_url, "XOUT"))
    asyncio.run(_publish(appliance_url, "XIN", 100, 20))
    query = run_query(spark, appliance_url, "XIN", "XOUT", tmp_path / "ck", 30)
    query.awaitTermination(240)
    assert query.exception() is None
    assert sorted(int(d) for d in asyncio.run(_sink_data(appliance_url, "XOUT"))) == list(range(120))
