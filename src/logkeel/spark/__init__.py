"""logkeel's PySpark data sources (Spark 4 Python data source API: no JVM jar needed).

- ``logkeel``: read and write topics of any Kafka-protocol broker, batch and streaming, with the
  options and columns of Spark's built-in Kafka connector;
- ``logkeel-segments``: read segment files straight from log dirs, corrupt ranges included.

``register(spark)`` makes both formats available on a session.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from logkeel.spark.kafka_source import KafkaDataSource
from logkeel.spark.segments import SegmentDataSource

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Registers the ``logkeel`` and ``logkeel-segments`` formats on ``spark``."""
    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(SegmentDataSource)
