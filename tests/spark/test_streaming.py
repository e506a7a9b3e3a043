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
    for i in range(n):  # plain publishes, then wait until all are stored (fast for large n)
        await nc.publish(f"{source.lower()}.{i % 3}", b"%d" % i)
    await nc.flush()
    for _ in range(600):
        if (await js.stream_info(source)).state.messages == n:
            break
        await asyncio.sleep(0.05)
    assert (await js.stream_info(source)).state.messages == n
    await nc.close()


async def _publish(url: str, source: str, first: int, n: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    for i in range(first, first + n):
        await js.publish(f"{source.lower()}.{i % 3}", b"%d" % i)
    await nc.close()


async def _sink_data(url: str, sink: str) -> list[bytes]:
    from appliance.spark import directget
    from appliance.spark.conn import Connection

    with Connection(url) as conn:
        bounds = directget.stream_bounds(conn, sink)
        return [m.data for m in directget.read_range(conn, sink, bounds.first_seq, bounds.last_seq)]


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


QUERY_SCRIPT = """
import sys
from pyspark.sql import SparkSession
import appliance.spark
url, source, sink, checkpoint, per_trigger = sys.argv[1:6]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
appliance.spark.register(spark)
df = (spark.readStream.format("jetstream").option("url", url).option("stream", source)
      .option("maxMessagesPerTrigger", per_trigger).load())
out = df.selectExpr(f"concat('{sink.lower()}.', subject) AS subject", "data")
(out.writeStream.format("jetstream").option("url", url).option("checkpointLocation", checkpoint)
 .option("window", "64").trigger(availableNow=True).start().awaitTermination())
"""


async def _sink_count(url: str, sink: str) -> int:
    nc = await nats.connect(url)
    info = await nc.jetstream(timeout=10).stream_info(sink)
    await nc.close()
    return int(info.state.messages)


def test_a_killed_query_resumes_from_its_checkpoint_exactly_once(spark, appliance_url, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    n, per_trigger = 15_000, 5_000
    asyncio.run(_setup(appliance_url, "KIN", "KOUT", n))
    script = tmp_path / "query.py"
    script.write_text(QUERY_SCRIPT)
    checkpoint = tmp_path / "ck"
    with open(tmp_path / "query.log", "wb") as log:
        child = subprocess.Popen([sys.executable, str(script), appliance_url, "KIN", "KOUT", str(checkpoint),
                                  str(per_trigger)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:  # kill the whole query (driver and JVM) once the second batch is partly written
            count = asyncio.run(_sink_count(appliance_url, "KOUT"))
            if per_trigger < count < 2 * per_trigger:
                break
            assert child.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
            assert time.monotonic() < deadline, count
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    killed_at = asyncio.run(_sink_count(appliance_url, "KOUT"))
    assert killed_at < n
    query = run_query(spark, appliance_url, "KIN", "KOUT", checkpoint, per_trigger)
    query.awaitTermination(240)
    assert query.exception() is None
    data = asyncio.run(_sink_data(appliance_url, "KOUT"))
    assert sorted(int(d) for d in data) == list(range(n))
