"""Spark finds the installed `batonmq` data source by itself (PySpark 4's lookup of "the
available Python Data Sources in Python path", which registers them "statically"), checked by
running PySpark's own lookup as the JVM runs it, minus the JVM: it writes the count of data
sources found, then each one's name and pickled class."""

from __future__ import annotations

import io
import pkgutil

from pyspark.serializers import read_int
from pyspark.sql.worker import lookup_data_sources
from pyspark.worker_util import pickleSer

from batonmq.spark.datasource import BatonMQDataSource


def test_pysparks_lookup_finds_batonmq_under_its_name():
    """lookup_data_sources: every module "info.name.startswith('pyspark_')" whose DefaultSource
    is a DataSource is registered under DefaultSource.name()."""
    assert "pyspark_batonmq" in {module.name for module in pkgutil.iter_modules()}
    written = io.BytesIO()

    lookup_data_sources._main(io.BytesIO(), written)

    written.seek(0)
    found = {}
    for _ in range(read_int(written)):
        name = written.read(read_int(written)).decode()
        found[name] = pickleSer._read_with_length(written)
    assert found["batonmq"] is BatonMQDataSource
