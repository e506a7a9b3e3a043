"""A Spark pipeline over appliance streams: read ORDERS, count and sum per subject per minute, write
the results to ORDER_STATS, read them back. `make spark-example` runs it against a fresh
`appliance run` on a free port (or pass --url nats://host:port for a running server whose ORDERS
stream allows direct get).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import nats
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import appliance.spark
from appliance.testing.process import ApplianceProcess, free_port


async def seed(url: str, orders: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="ORDERS", subjects=["orders.>"], allow_direct=True)
    await js.add_stream(name="ORDER_STATS", subjects=["stats.>"], allow_direct=True)
    regions = ["eu", "us", "apac"]
    for i in range(orders):
        amount = 10 + (i * 7) % 90
        await js.publish(f"orders.{regions[i % 3]}", json.dumps({"id": i, "amount": amount}).encode())
    await nc.close()


def pipeline(spark: SparkSession, url: str) -> None:
    orders = spark.read.format("jetstream").option("url", url).option("stream", "ORDERS").load()
    stats = (
        orders.withColumn("amount", F.get_json_object(F.col("data").cast("string"), "$.amount").cast("long"))
        .groupBy("subject", F.window("time", "1 minute").alias("minute"))
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
    )
    out = stats.select(
        F.concat(F.lit("stats."), F.col("subject")).alias("subject"),
        F.to_json(F.struct(F.col("subject"), F.col("minute.start").cast("string").alias("minute"),
                           "orders", "total")).cast("binary").alias("data"),
    )
    out.write.format("jetstream").option("url", url).option("writeId", "orders-per-minute").mode("append").save()
    back = spark.read.format("jetstream").option("url", url).option("stream", "ORDER_STATS").load()
    for row in back.orderBy("seq").collect():
        print(row.subject, row.data.decode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="")
    parser.add_argument("--orders", type=int, default=3000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with ExitStack() as stack:
        url = args.url
        if not url:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="appliance-spark-example-")))
            config = base / "example.conf"
            config.write_text(f"listen: 127.0.0.1:{free_port()}\njetstream {{ store_dir: {base / 'store'} }}\n")
            server = stack.enter_context(ApplianceProcess(["-c", str(config)], log_dir=base))
            url = f"nats://127.0.0.1:{server.client_port}"
            asyncio.run(seed(url, args.orders))
        spark = (SparkSession.builder.master("local[2]").appName("appliance-example")
                 .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            appliance.spark.register(spark)
            pipeline(spark, url)
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
