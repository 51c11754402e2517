"""BatonMQ for PySpark (`pip install 'batonmq[spark]'`, PySpark 4.2 or later): the `batonmq`
data source (`datasource.py`), registered in a session by `register(spark)`.

The broker never imports this package; it talks to a broker only over AMQP 0-9-1."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("batonmq")` known to `spark` (reads, writes, batch and streaming)."""
    from batonmq.spark.datasource import BatonMQDataSource

    spark.dataSource.register(BatonMQDataSource)
