"""A PySpark pipeline that writes keyed rows to Kafka: `kqp demo --spark`, the deploy job, the tests.

One DataFrame recipe (`demo_frame`: key = the row number as a string, so a consumer can check that
every row arrived exactly once; value = a fixed-size payload) and one write (`write_batch`) are
shared by everything that runs Spark against kqp, so the demo shows what the tests check.

`run_spark_demo` writes through the jar-free `kqp-kafka` sink with a commit log in a temporary
folder, and reads that log back for what the Spark tasks themselves saw: rows and bytes
acknowledged, and the throttle time librdkafka reported (KIP-219 `throttle_time_ms`, whether kqp
or a broker set it). The caller (the CLI) adds kqp's side: the quota and kqp's throttle counters.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kqp.spark import FORMAT
from kqp.spark.session import local_session, spark_missing_reason

DEFAULT_TOPIC = "kqp-spark-demo"
DEFAULT_CLIENT_ID = "kqp-spark-demo"


class SparkUnavailable(RuntimeError):
    """pyspark, pyarrow, confluent-kafka or Java is missing; str() says which."""


def demo_frame(spark: Any, rows: int, *, value_bytes: int = 100, partitions: int = 4) -> Any:
    """`rows` rows, keys "0".."rows-1", values of `value_bytes` bytes, in `partitions` tasks."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, numPartitions=partitions)
    return ids.select(
        F.col("id").cast("string").alias("key"),
        # lpad pads and truncates to exactly value_bytes characters (ASCII, so bytes).
        F.lpad(F.col("id").cast("string"), value_bytes, "v").alias("value"),
    )


def write_batch(df: Any, bootstrap: str, topic: str, *, fmt: str = FORMAT,
                options: Mapping[str, str] | None = None) -> None:
    """df.write to Kafka with the given sink format ("kqp-kafka" or Spark's built-in "kafka")."""
    writer = df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    # The built-in sink only accepts append (it cannot overwrite a topic); ours ignores the mode.
    writer.mode("append").save()


def read_commit_log(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines the sink's driver-side commit appended (option `kqp.commitLog`)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_spark_demo(
    bootstrap: str,
    rows: int = 100_000,
    *,
    topic: str = DEFAULT_TOPIC,
    client_id: str = DEFAULT_CLIENT_ID,
    value_bytes: int = 100,
    partitions: int = 4,
    master: str = "local[2]",
    spark: Any = None,
    producer_options: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write `rows` rows to `topic` through `bootstrap` (kqp) with the kqp-kafka sink.

    Returns rows, bytes, seconds, rows_per_second, bytes_per_second, tasks, throttle_events and
    throttle_seconds (summed over tasks, as librdkafka reported them), client_id and topic.
    `bytes` counts keys and values only; kqp's producer_byte_rate counts whole Produce frames
    (record and batch headers too), so the achieved payload rate sits somewhat below the quota.
    `seconds` is the job's wall time, Spark's task start-up included.
    Raises SparkUnavailable when Spark cannot run here, and Spark's error when the job fails.
    `spark` reuses a caller's session (left running); otherwise a local one is started and stopped.
    """
    reason = spark_missing_reason()
    if reason:
        raise SparkUnavailable(reason)
    from kqp.spark.sink import register

    own_session = spark is None
    if own_session:
        spark = local_session("kqp-spark-demo", master)
    try:
        register(spark)
        df = demo_frame(spark, rows, value_bytes=value_bytes, partitions=partitions)
        with tempfile.TemporaryDirectory(prefix="kqp-spark-demo-") as tmp:
            log_path = Path(tmp) / "commits.jsonl"
            options = {"kafka.client.id": client_id, "kqp.commitLog": str(log_path)}
            options.update(producer_options or {})
            started = time.monotonic()
            write_batch(df, bootstrap, topic, options=options)
            seconds = time.monotonic() - started
            commits = [c for c in read_commit_log(log_path) if c["outcome"] == "commit"]
    finally:
        if own_session:
            spark.stop()
    written = sum(c["rows"] for c in commits)
    nbytes = sum(c["bytes"] for c in commits)
    return {
        "rows": written,
        "bytes": nbytes,
        "seconds": seconds,
        "rows_per_second": written / seconds if seconds > 0 else 0.0,
        "bytes_per_second": nbytes / seconds if seconds > 0 else 0.0,
        "tasks": sum(c["tasks"] for c in commits),
        "throttle_events": sum(c["throttle_events"] for c in commits),
        "throttle_seconds": sum(c["throttle_seconds"] for c in commits),
        "client_id": client_id,
        "topic": topic,
    }
