"""The `batonmq` PySpark data source: stream queues read by offset (batch and streaming),
classic queues read at least once (streaming), and rows published with confirms (batch and
streaming). Its options are in `options.py`, its
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

from batonmq.spark.classic import ClassicQueueReader
from batonmq.spark.options import OptionError, ReadOptions, WriteOptions
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
        options = ReadOptions.parse(self.options)
        if options.queue_type == "classic":
            raise OptionError(
                "a classic queue is read with spark.readStream only: a batch read would take "
                "its messages away"
            )
        return StreamRangeReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = ReadOptions.parse(self.options)
        if options.queue_type == "classic":
            return ClassicQueueReader(options)
        return StreamOffsetReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return ConfirmedWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ConfirmedStreamWriter(WriteOptions.parse(self.options))
