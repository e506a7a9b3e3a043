"""appliance.spark: PySpark 4.x data sources for appliance streams (the optional extra `appliance[spark]`).

    import appliance.spark
    appliance.spark.register(spark)
    spark.read.format("jetstream").option("url", "nats://127.0.0.1:4222").option("stream", "ORDERS").load()

- conn.py       a small blocking NATS client for Spark tasks
- directget.py  reading a sequence range with batch Direct Get (no consumer on the server)
- plan.py       options + pushed filters -> sequence/time ranges and a server-side subject filter (pure)
- formats.py    the DataSource classes of both formats
- source.py     the `jetstream` batch reader
- streaming.py  the `jetstream` streaming reader (offsets = stream sequences) and writer
- writer.py     the `jetstream` batch writer: async publish, bounded window, PubAck checks, Nats-Msg-Id
- store_files.py  offline block planning and checked decoding of stream directories (pure)
- source_store.py the `jetstream-store` data source over store_files
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `jetstream` and `jetstream-store` formats on a SparkSession."""
    # imported here: `import appliance.spark` must not need pyspark (the extra is optional)
    from appliance.spark.formats import JetStreamDataSource, StoreDataSource

    spark.dataSource.register(JetStreamDataSource)
    spark.dataSource.register(StoreDataSource)
