"""kqp.spark: a Kafka sink for PySpark that needs no jars (Spark 4 Python Data Source).

`from kqp.spark import register; register(spark)` makes `df.write.format("kqp-kafka")` and
`df.writeStream.format("kqp-kafka")` available, with the options and columns of Spark's built-in
Kafka sink (deploy/spark/README.md compares the two). pyspark is imported only when the sink itself
is used, so `kqp` and `kqp.spark.demo` import on machines without it and say what is missing.
"""

from __future__ import annotations

from typing import Any

FORMAT = "kqp-kafka"
__all__ = ["FORMAT", "KafkaSinkDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in ("register", "KafkaSinkDataSource"):
        from kqp.spark import sink

        return getattr(sink, name)
    raise AttributeError(f"module 'kqp.spark' has no attribute {name!r}")
