"""The `batonmq` data source for PySpark's discovery of installed Python data sources.

PySpark 4 registers, in every session, the `DefaultSource` of each importable top-level module
whose name begins with ``pyspark_`` (pyspark/sql/worker/lookup_data_sources.py), so that
`spark.read.format("batonmq")` works without `batonmq.spark.register(spark)` wherever the
`batonmq[spark]` wheel is installed. Spark imports this module only when it looks data sources
up; the broker never does."""

from batonmq.spark.datasource import BatonMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
