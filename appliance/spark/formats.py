"""The two formats `register()` adds: `jetstream` (a live stream: batch and streaming read and
write) and `jetstream-store` (stream directories read offline)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from appliance.spark.source import SCHEMA, JetStreamReader, lower_options
from appliance.spark.source_store import StoreReader
from appliance.spark.streaming import JetStreamStreamReader, JetStreamStreamWriter
from appliance.spark.writer import JetStreamWriter


class JetStreamDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> JetStreamReader:
        return JetStreamReader(lower_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> JetStreamWriter:
        return JetStreamWriter(lower_options(self.options), schema)

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:
        return JetStreamStreamReader(lower_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> JetStreamStreamWriter:
        return JetStreamStreamWriter(lower_options(self.options), schema)


class StoreDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "jetstream-store"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> StoreReader:
        return StoreReader(lower_options(self.options))
