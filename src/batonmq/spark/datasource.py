"""The `batonmq` PySpark data source: stream queues read by offset (batch and streaming), and
rows published with confirms (batch and streaming). Its options are in `options.py`, its
schema in `rows.py`."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from batonmq.spark.options import ReadOptions, WriteOptions
from batonmq.spark.readers import StreamOffsetReader, StreamRangeReader
from batonmq.spark.rows import SCHEMA
from batonmq.spark.writers import ConfirmedStreamWriter, ConfirmedWriter


class BatonMQDataSource(DataSource):
    """`spark.read`, `spark.readStream`, `df.write` and `df.writeStream` with
    `.format("batonmq")`. A user-given schema is ignored for reads: the rows are SCHEMA's."""

    @classmethod
    def name(cls) -> str:
        return "batonmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamRangeReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamOffsetReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return ConfirmedWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ConfirmedStreamWriter(WriteOptions.parse(self.options))
