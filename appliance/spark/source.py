"""The `jetstream` batch reader (PySpark 4.x Python Data Source API; formats.py names the formats).

    spark.read.format("jetstream").option("url", "nats://127.0.0.1:4222").option("stream", "ORDERS").load()

Options (case-insensitive): url (nats:// or tls://), stream, apiPrefix (default $JS.API), startSeq,
endSeq, startTime, endTime (RFC 3339 or integer ns), subject (a NATS filter), partitionSize
(sequences per partition, default 100000) or numPartitions, timeout (seconds); credentials and TLS
as credentials.py says (user, password, token, nkeySeed, nkeySeedFile, credsFile, jwt, tls,
tlsCaFile, tlsCertFile, tlsKeyFile, tlsHandshakeFirst).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from appliance.spark import directget, plan
from appliance.spark.conn import Auth, Connection, TlsFiles
from appliance.spark.credentials import auth_from_options, tls_from_options
from appliance.spark.rows import BatchBuilder

SCHEMA = "stream string, seq long, subject string, time timestamp, headers map<string, array<string>>, data binary"
DEFAULT_PARTITION_SIZE = 100_000


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str
    stream: str
    auth: Auth
    api: str
    timeout_s: float
    tls: TlsFiles = TlsFiles()

    def connect(self) -> Connection:
        return Connection(self.url, self.auth, tls=self.tls, timeout_s=self.timeout_s)


def endpoint_of(options: dict[str, str], *, need_stream: bool = True) -> Endpoint:
    stream = options.get("stream", "")
    if need_stream and not stream:
        raise ValueError("jetstream: option 'stream' is required")
    return Endpoint(
        url=options.get("url", "nats://127.0.0.1:4222"),
        stream=stream,
        auth=auth_from_options(options),
        api=options.get("apiprefix", directget.API_PREFIX),
        timeout_s=float(options.get("timeout", "30")),
        tls=tls_from_options(options),
    )


def lower_options(options: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


@dataclass(frozen=True)
class SeqRange(InputPartition):  # type: ignore[misc]
    lo: int
    hi: int
    direct: bool = True  # False: the stream does not allow direct get; read with STREAM.MSG.GET


class _FilterSpec:
    """A Spark Filter as (column, op, value) when it names one top-level column."""

    @staticmethod
    def of(spark_filter: Filter) -> tuple[str, str, Any] | None:
        attribute = getattr(spark_filter, "attribute", None)
        if not isinstance(attribute, tuple) or len(attribute) != 1:
            return None
        return attribute[0], type(spark_filter).__name__, getattr(spark_filter, "value", None)


class _Pushdown:
    """reader.pushFilters as Spark sees it. Spark refuses to plan a read whose reader overrides
    pushFilters while spark.sql.python.filterPushdown.enabled is false; this reader is correct
    without pushdown too (Spark then filters what it reads), so it shows Spark the base method as
    its `__func__` and Spark calls it only when pushdown is on."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.__func__ = DataSourceReader.pushFilters

    def __call__(self, filters: list[Filter]) -> Iterator[Filter]:
        return self.reader.push_filters(filters)


class PushdownSlot:
    def __get__(self, reader: Any, owner: type) -> Any:
        if reader is None:
            return self
        return _Pushdown(reader)


def push_into(reader: Any, filters: list[Filter]) -> Iterator[Filter]:
    """Narrow reader.plan (rebuilt from its options: a reader asked again starts afresh) by the
    filters it evaluates; yields the others for Spark."""
    reader.plan = plan.from_options(reader.options)
    if reader.options.get("pushdown", "true").lower() == "false":
        yield from filters  # Spark filters what is read (see README: Spark 4.3.0 reuse of a pushed read)
        return
    for spark_filter in filters:
        spec = _FilterSpec.of(spark_filter)
        narrowed = plan.with_filter(reader.plan, *spec) if spec else None
        if narrowed is None:
            yield spark_filter
        else:
            reader.plan = narrowed


class JetStreamReader(DataSourceReader):  # type: ignore[misc]
    pushFilters = PushdownSlot()

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.endpoint = endpoint_of(options)
        self.plan = plan.from_options(options)
        self.partition_size = int(options.get("partitionsize", DEFAULT_PARTITION_SIZE))
        self.num_partitions = int(options.get("numpartitions", "0"))

    def push_filters(self, filters: list[Filter]) -> Iterator[Filter]:
        return push_into(self, filters)

    def partitions(self) -> Sequence[InputPartition]:
        wanted = self.plan
        if wanted.empty:
            return [SeqRange(1, 0)]
        with self.endpoint.connect() as conn:
            bounds = directget.stream_bounds(conn, self.endpoint.stream, api=self.endpoint.api)
            lo, hi = max(wanted.seq_lo, bounds.first_seq), min(wanted.seq_hi, bounds.last_seq)
            # time to sequence by Direct Get start_time; without direct get times are only filtered
            if wanted.time_lo != plan.TIME_MIN_US and lo <= hi and bounds.allow_direct:
                at = directget.seq_at_time(conn, self.endpoint.stream, wanted.time_lo * 1000, api=self.endpoint.api)
                lo = max(lo, at) if at is not None else hi + 1
            if wanted.time_hi != plan.TIME_MAX_US and lo <= hi and bounds.allow_direct:
                after = directget.seq_at_time(
                    conn, self.endpoint.stream, (wanted.time_hi + 1) * 1000, api=self.endpoint.api
                )
                if after is not None:
                    hi = min(hi, after - 1)
        ranges = plan.split_ranges(lo, hi, size=self.partition_size, count=self.num_partitions)
        return [SeqRange(a, b, bounds.allow_direct) for a, b in ranges] or [SeqRange(1, 0)]

    def read(self, partition: SeqRange) -> Iterator[pa.RecordBatch]:
        if partition.lo > partition.hi:
            return
        wanted = self.plan
        rows = BatchBuilder(self.endpoint.stream)
        with self.endpoint.connect() as conn:
            read = directget.read_range if partition.direct else directget.read_range_msg_get
            # a partition inside the plan's seq range needs a look per row only for subject/time bounds
            inside = wanted.seq_lo <= partition.lo and partition.hi <= wanted.seq_hi
            check = wanted.checks_subject_or_time or not inside
            for msg in read(
                conn, self.endpoint.stream, partition.lo, partition.hi, wanted.server_filter(), api=self.endpoint.api
            ):
                if not check or wanted.accepts(msg.seq, msg.subject, msg.time_us):
                    rows.add(msg.seq, msg.subject, msg.time_us, msg.headers, msg.data)
                    if rows.full():
                        yield rows.take()
        if len(rows):
            yield rows.take()
