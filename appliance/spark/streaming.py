"""Streaming read and write of the `jetstream` format.

Read: the offset is `{"seq": N}`, the next stream sequence to read (the stream's own sequence
numbers, so a checkpoint names exactly which messages a micro-batch covered and a restart
re-reads the same range: nothing lost, nothing repeated). Each micro-batch is a sequence range
read with batch Direct Get as in a batch read; no consumer is kept on the server. Options as the
batch reader, plus `startingPosition` ("earliest", the default, or "latest") and
`maxMessagesPerTrigger` (a bound on the sequences one micro-batch covers; deleted sequences
count, so a batch may hold fewer messages). Trigger.AvailableNow reads up to the stream's last
sequence when the query started, honouring maxMessagesPerTrigger.

Write: as the batch writer, with Nats-Msg-Id `<queryId>-<batchId>-<partition>-<row>` (or the
msgIdColumn value), so a micro-batch re-run after a failure or restart is deduplicated by the
stream: with this source, exactly-once end to end within the stream's duplicate window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamReader, DataSourceStreamWriter, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from appliance.spark import directget, plan
from appliance.spark.source import DEFAULT_PARTITION_SIZE, JetStreamReader, SeqRange, endpoint_of
from appliance.spark.writer import JetStreamWriter, WriteReport


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.endpoint = endpoint_of(options)
        self.position = options.get("startingposition", "earliest").lower()
        if self.position not in ("earliest", "latest"):
            raise ValueError("jetstream: startingPosition is 'earliest' or 'latest'")
        self.max_per_trigger = int(options.get("maxmessagespertrigger", "0"))
        self.partition_size = int(options.get("partitionsize", DEFAULT_PARTITION_SIZE))
        self.available_now_end: int | None = None
        self.batch_reader = JetStreamReader(options)  # reads one partition exactly as a batch read does

    def _bounds(self) -> directget.StreamBounds:
        with self.endpoint.connect() as conn:
            return directget.stream_bounds(conn, self.endpoint.stream, api=self.endpoint.api)

    def initialOffset(self) -> dict[str, int]:
        bounds = self._bounds()
        if self.position == "latest":
            return {"seq": bounds.last_seq + 1}
        start = max(bounds.first_seq, self.batch_reader.plan.seq_lo, 1)
        wanted = self.batch_reader.plan
        if wanted.time_lo != plan.TIME_MIN_US and bounds.allow_direct:  # startTime: the first message stored then
            with self.endpoint.connect() as conn:
                at = directget.seq_at_time(conn, self.endpoint.stream, wanted.time_lo * 1000, api=self.endpoint.api)
            start = max(start, at if at is not None else bounds.last_seq + 1)
        return {"seq": start}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_end = self._bounds().last_seq + 1

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = self.available_now_end if self.available_now_end is not None else self._bounds().last_seq + 1
        end = min(end, self.batch_reader.plan.seq_hi + 1)
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["seq"] + limit.max_rows)
        return {"seq": max(end, start["seq"])}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"seq": self._bounds().last_seq + 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = plan.split_ranges(start["seq"], end["seq"] - 1, size=self.partition_size)
        direct = self._bounds().allow_direct if ranges else True
        return [SeqRange(a, b, direct) for a, b in ranges]

    def read(self, partition: SeqRange) -> Iterator[tuple[Any, ...]]:
        return self.batch_reader.read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: no consumer or other state is kept on the server."""


class JetStreamStreamWriter(DataSourceStreamWriter):  # type: ignore[misc]
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.batch_writer = JetStreamWriter(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        query = (context.getLocalProperty("sql.streaming.queryId") if context else None) or self.batch_writer.write_id
        batch = (context.getLocalProperty("streaming.sql.batchId") if context else None) or "0"
        return self.batch_writer.write_rows(iterator, partition, f"{query}-{batch}-{partition}")

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Every message was acknowledged by the stream before its task ended."""

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Published messages stay; a re-run of the batch is deduplicated by their Nats-Msg-Id."""
