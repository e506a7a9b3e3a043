"""Batch write of the `jetstream` format: PubAcks checked, Nats-Msg-Id dedupe of a re-run write,
a failed PubAck fails the job with the server's words."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

import nats  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def _add_stream(url: str, name: str, subjects: list[str], **extra: object) -> None:
    nc = await nats.connect(url)
    await nc.jetstream(timeout=10).add_stream(name=name, subjects=subjects, allow_direct=True, **extra)
    await nc.close()


async def _stream_messages(url: str, name: str) -> int:
    nc = await nats.connect(url)
    info = await nc.jetstream(timeout=10).stream_info(name)
    await nc.close()
    return int(info.state.messages)


def test_write_then_rerun_is_deduplicated_and_read_back(spark, appliance_url) -> None:
    asyncio.run(_add_stream(appliance_url, "WOUT", ["wout.>"]))
    rows = [(f"wout.{i % 3}", f"v{i}".encode(), {"X-Row": [str(i)]}) for i in range(300)]
    df = spark.createDataFrame(rows, "subject string, data binary, headers map<string, array<string>>").repartition(2)
    writer = df.write.format("jetstream").option("url", appliance_url).option("writeId", "job-1").option("window", "16")
    writer.mode("append").save()
    assert asyncio.run(_stream_messages(appliance_url, "WOUT")) == 300
    writer.mode("append").save()  # the same write again: every Nats-Msg-Id is a duplicate
    assert asyncio.run(_stream_messages(appliance_url, "WOUT")) == 300
    back = spark.read.format("jetstream").option("url", appliance_url).option("stream", "WOUT").load().collect()
    assert sorted(r.data for r in back) == sorted(r[1] for r in rows)
    assert all(r.headers["X-Row"] == [r.data.decode()[1:]] and len(r.headers["Nats-Msg-Id"]) == 1 for r in back)


def test_msg_id_from_a_column(spark, appliance_url) -> None:
    asyncio.run(_add_stream(appliance_url, "WID", ["wid.>"]))
    df = spark.createDataFrame([("wid.a", "x", "id-1"), ("wid.a", "y", "id-1"), ("wid.b", "z", "id-2"),
                                ("wid.c", "n", None)], "subject string, data string, key string").coalesce(1)
    df.write.format("jetstream").option("url", appliance_url).option("msgIdColumn", "key").mode("append").save()
    assert asyncio.run(_stream_messages(appliance_url, "WID")) == 3  # a null key: the generated id


def test_a_failed_puback_fails_the_write_with_the_server_error(spark, appliance_url) -> None:
    asyncio.run(_add_stream(appliance_url, "WFULL", ["wfull.>"], max_msgs=5, discard="new"))
    df = spark.createDataFrame([(f"wfull.{i}", b"x") for i in range(20)], "subject string, data binary").coalesce(1)
    with pytest.raises(Exception, match="maximum messages exceeded"):
        df.write.format("jetstream").option("url", appliance_url).mode("append").save()
    df = spark.createDataFrame([("nowhere.x", b"x")], "subject string, data binary")
    with pytest.raises(Exception, match="no stream stores subject 'nowhere.x'"):
        df.write.format("jetstream").option("url", appliance_url).mode("append").save()
