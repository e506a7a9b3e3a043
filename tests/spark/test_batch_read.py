"""Batch read of the `jetstream` format against `appliance run`: columns, options, partitions, and
pushdown answers equal to a full scan filtered by Spark."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

import nats  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def _fill(url: str, stream: str, subjects: list[str], n: int) -> list[int]:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], allow_direct=True)
    seqs = []
    for i in range(n):
        subject = f"{stream.lower()}.{subjects[i % len(subjects)]}"
        headers = {"X-Index": str(i)} if i % 3 == 0 else None
        ack = await js.publish(subject, f"m{i}".encode(), headers=headers)
        seqs.append(ack.seq)
    await nc.close()
    return seqs


def fill(url: str, stream: str, subjects: list[str], n: int) -> list[int]:
    return asyncio.run(_fill(url, stream, subjects, n))


def test_reads_every_message_with_its_columns(spark, appliance_url) -> None:
    fill(appliance_url, "READ1", ["a", "b.c"], 50)
    df = spark.read.format("jetstream").option("url", appliance_url).option("stream", "READ1").load()
    assert [f.name for f in df.schema.fields] == ["stream", "seq", "subject", "time", "headers", "data"]
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert [r.seq for r in rows] == list(range(1, 51))
    assert rows[0].stream == "READ1" and rows[0].subject == "read1.a" and rows[1].subject == "read1.b.c"
    assert rows[0].data == b"m0" and rows[0].headers == {"X-Index": ["0"]} and rows[1].headers == {}
    assert isinstance(rows[0].time, datetime)


def test_partitions_and_options(spark, appliance_url) -> None:
    fill(appliance_url, "READ2", ["a", "b"], 40)
    reader = spark.read.format("jetstream").option("url", appliance_url).option("stream", "READ2")
    df = reader.option("partitionSize", "7").load()
    assert df.rdd.getNumPartitions() == 6
    assert df.count() == 40
    ranged = reader.option("startSeq", "5").option("endSeq", "12").option("subject", "read2.b").load()
    assert sorted(r.seq for r in ranged.collect()) == [6, 8, 10, 12]


FILTERS = [
    "seq > {a}", "seq >= {a} AND seq < {b}", "seq = {a}", "subject = 'pd.x'", "subject LIKE 'pd.y%'",
    "subject LIKE 'pd.%' AND seq <= {b}", "time >= timestamp'{t}'", "time < timestamp'{t}' AND subject = 'pd.z.w'",
    "seq > {a} OR subject = 'pd.x'", "subject IN ('pd.x', 'pd.y1')", "subject LIKE 'pd.y%' AND time > timestamp'{t}'",
]


def test_pushdown_matches_a_full_scan_on_random_filters(spark, appliance_url) -> None:
    fill(appliance_url, "PD", ["x", "y1", "y2", "z.w"], 120)
    df = spark.read.format("jetstream").option("url", appliance_url).option("stream", "PD").load()
    full = df.collect()
    times = sorted(r.time for r in full)
    rng = random.Random(17)
    for template in FILTERS:
        for _ in range(2):
            a, b = sorted(rng.sample(range(0, 125), 2))
            t = times[rng.randrange(len(times))].astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
            condition = template.format(a=a, b=b, t=t)
            for enabled in ("true", "false"):
                spark.conf.set("spark.sql.python.filterPushdown.enabled", enabled)
                try:  # a DataFrame per query: see the xfail test below
                    fresh = spark.read.format("jetstream").option("url", appliance_url).option("stream", "PD").load()
                    got = sorted(r.seq for r in fresh.where(condition).collect())
                finally:
                    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
                want = sorted(r.seq for r in spark.createDataFrame(full).where(condition).collect())
                assert got == want, (condition, enabled)


@pytest.mark.xfail(reason="Spark 4.3.0 keeps the pushdown read info on the relation: a later query of the same "
                   "DataFrame without pushable filters reuses the filtered reader (fixed upstream, scoped to the scan)")
def test_a_dataframe_queried_with_filters_then_without_sees_everything(spark, appliance_url) -> None:
    fill(appliance_url, "REUSE", ["a"], 10)
    df = spark.read.format("jetstream").option("url", appliance_url).option("stream", "REUSE").load()
    assert df.where("seq < 3").count() == 2
    assert df.count() == 10


def test_pushdown_off_per_dataframe_keeps_a_reused_dataframe_correct(spark, appliance_url) -> None:
    fill(appliance_url, "REUSE2", ["a", "b"], 10)
    df = (spark.read.format("jetstream").option("url", appliance_url).option("stream", "REUSE2")
          .option("pushdown", "false").load())
    assert df.where("seq < 3 AND subject = 'reuse2.a'").count() == 1
    assert df.count() == 10


def test_pushed_filters_bring_only_matching_messages_over_the_wire(appliance_url, monkeypatch) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, LessThan, StringEndsWith

    from appliance.spark.conn import Connection
    from appliance.spark.source import JetStreamReader

    fill(appliance_url, "WIRE", ["x", "y", "z", "w"], 200)
    frames: list[str] = []
    original = Connection.next_frame

    def counting(self: Connection, timeout_s: float | None = None):  # type: ignore[no-untyped-def]
        frame = original(self, timeout_s)
        frames.append(frame.subject)
        return frame

    monkeypatch.setattr(Connection, "next_frame", counting)
    reader = JetStreamReader({"url": appliance_url, "stream": "WIRE", "partitionsize": "40"})
    filters = [EqualTo(("subject",), "wire.y"), GreaterThan(("seq",), 50), LessThan(("seq",), 150),
               StringEndsWith(("subject",), "y")]
    assert list(reader.pushFilters(filters)) == [filters[3]]
    parts = reader.partitions()
    assert parts[0].lo == 51 and parts[-1].hi == 149
    frames.clear()
    seqs = [s for p in parts for batch in reader.read(p) for s in batch.column("seq").to_pylist()]
    assert seqs == [s for s in range(51, 150) if s % 4 == 2]
    # every frame on the wire was a matching message, or the end-of-batch status of a request
    assert len(frames) == len(seqs) + len(parts)


async def _delete(url: str, stream: str, seqs: list[int]) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    for seq in seqs:
        await js.delete_msg(stream, seq)
    await nc.close()


def test_pipelined_direct_get_with_deleted_sequences(appliance_url) -> None:
    from appliance.spark import directget
    from appliance.spark.conn import Connection

    fill(appliance_url, "GAPS", ["a"], 2600)
    gone = [1, 5, 700, 1024, 1025, 1030, 2047, 2048, 2600]
    asyncio.run(_delete(appliance_url, "GAPS", gone))
    live = [s for s in range(1, 2601) if s not in gone]
    with Connection(appliance_url) as conn:
        assert [m.seq for m in directget.read_range(conn, "GAPS", 1, 2600)] == live
        assert [m.seq for m in directget.read_range(conn, "GAPS", 1000, 2100)] == [s for s in live if 1000 <= s <= 2100]
        assert [m.seq for m in directget.read_range(conn, "GAPS", 2600, 9000)] == []
        assert [m.seq for m in directget.read_range(conn, "GAPS", 3, 3)] == [3]


async def _fill_without_direct(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="NODIRECT", subjects=["nd.>"])
    for i in range(300):
        await js.publish(f"nd.{i % 3}", b"%d" % i, headers={"X": str(i)} if i % 2 else None)
    for seq in (2, 100, 299):
        await js.delete_msg("NODIRECT", seq)
    await nc.close()


def test_a_stream_without_direct_get_is_read_with_msg_get(spark, appliance_url) -> None:
    asyncio.run(_fill_without_direct(appliance_url))
    df = spark.read.format("jetstream").option("url", appliance_url).option("stream", "NODIRECT").load()
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert [r.seq for r in rows] == [s for s in range(1, 301) if s not in (2, 100, 299)]
    assert rows[1].data == b"2" and rows[1].headers == {} and rows[2].headers == {"X": ["3"]}
    t = rows[150].time.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    fresh = spark.read.format("jetstream").option("url", appliance_url).option("stream", "NODIRECT").load()
    got = sorted(r.seq for r in fresh.where(f"subject = 'nd.1' AND time >= timestamp'{t}'").collect())
    assert got == sorted(r.seq for r in rows if r.subject == "nd.1" and r.time >= rows[150].time)
