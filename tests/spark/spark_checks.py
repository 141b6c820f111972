"""Shared by the Spark tests: read a topic back (every key exactly once), run a short streaming query."""

from __future__ import annotations

import importlib.util
import re
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from helpers.observability import metrics_url

# The quotas of the throttling kqp fixture (conftest.py), one client id per test so each test's
# throttle counter is its own. 100k rows of ~25 payload bytes are ~3 MB of Produce frames: at
# 750 kB/s about four seconds, twenty 0.2 s quota windows of throttling.
# The stream writes 3 micro-batches of 3000 rows of ~33 frame bytes (~100 kB each). Kafka's rate
# divides by at least (window_count - 1) windows of elapsed time, here 2 s, so one batch alone
# measures ~50 kB/s: a 30 kB/s quota is exceeded by the first batch however slowly a loaded
# machine runs the batches, and the ~300 kB take about eight seconds, forty windows.
WINDOW_SECONDS = 0.2
QUOTA_BYTES_PER_SECOND = 750_000
STREAM_QUOTA_BYTES_PER_SECOND = 30_000
STREAM_ROWS, STREAM_ROWS_PER_BATCH = 9_000, 3_000
BATCH_CLIENT = "spark-batch-throttled"
STREAM_CLIENT = "spark-stream-throttled"
DEMO_CLIENT = "spark-demo-throttled"
THROTTLING_QUOTAS = {
    "window_size_seconds": WINDOW_SECONDS,
    "window_count": 11,
    "entities": [
        {"client_id": BATCH_CLIENT, "producer_byte_rate": QUOTA_BYTES_PER_SECOND},
        {"client_id": DEMO_CLIENT, "producer_byte_rate": QUOTA_BYTES_PER_SECOND},
        {"client_id": STREAM_CLIENT, "producer_byte_rate": STREAM_QUOTA_BYTES_PER_SECOND},
    ],
}


DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "spark"


def deploy_job() -> ModuleType:
    """deploy/spark/job.py as a module, so a test runs its functions in the shared SparkSession."""
    spec = importlib.util.spec_from_file_location("kqp_deploy_spark_job", DEPLOY / "job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kqp_throttle_seconds(kqp: Any, client_id: str) -> float:
    """kqp_throttle_seconds_total summed over quota types for one client id, from kqp's /metrics."""
    with urllib.request.urlopen(f"{metrics_url(kqp)}/metrics", timeout=5) as response:
        text = response.read().decode()
    label = re.compile(rf'[{{,]client_id="{re.escape(client_id)}"[,}}]')
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kqp_throttle_seconds_total{") and label.search(line))


def assigned_consumer(bootstrap: str, topics: list[str]) -> Any:
    """A consumer reading every partition of `topics` from the beginning: assign, not subscribe,
    so there is no group rebalance to wait for."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
    })
    parts = []
    for name in topics:
        metadata = consumer.list_topics(name, timeout=10).topics[name]
        parts += [TopicPartition(name, p, OFFSET_BEGINNING) for p in metadata.partitions]
    consumer.assign(parts)
    return consumer


def consume_keys(bootstrap: str, topic: str, expected: int, timeout: float = 60.0,
                 quiet: float = 1.0) -> Counter[bytes]:
    """Count the keys in `topic`, reading until `expected` keys arrived and `quiet` seconds passed
    without more (so a duplicate after the last new key is still seen), or `timeout` seconds."""
    consumer = assigned_consumer(bootstrap, [topic])
    counts: Counter[bytes] = Counter()
    try:
        deadline = time.monotonic() + timeout
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.5)
            for message in batch:
                if message.error():
                    raise RuntimeError(f"consumer error: {message.error()}")
                counts[message.key()] += 1
            if batch:
                last_new = time.monotonic()
            elif sum(counts.values()) >= expected and time.monotonic() - last_new >= quiet:
                break
    finally:
        consumer.close()
    return counts


def assert_exactly_once(counts: Counter[bytes], rows: int) -> None:
    """Keys "0".."rows-1", each exactly once, and nothing else."""
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} keys written more than once, e.g. {list(duplicates.items())[:5]}"
    missing = rows - len(counts)
    assert set(counts) == {str(i).encode() for i in range(rows)}, f"{missing} keys missing or unexpected"


def run_stream(spark: object, bootstrap: str, topic: str, checkpoint: str, *, rows: int, rows_per_batch: int,
               fmt: str = "kqp-kafka", options: dict[str, str] | None = None, timeout: float = 120.0) -> object:
    """A rate-micro-batch stream of keys "0".."rows-1" into a Kafka sink (`fmt`), stopped cleanly.

    The source keeps producing batches; rows past `rows` are filtered out, so once the stream has
    moved past them every later batch is empty and stopping it cannot cut a batch that writes.
    Returns the stopped query.
    """
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("rate-micro-batch")  # type: ignore[attr-defined]
        .option("rowsPerBatch", rows_per_batch).option("numPartitions", 2).load()
        .where(F.col("value") < rows)
        .select(F.col("value").cast("string").alias("key"), F.lit("payload-0123456789").alias("value"))
    )
    writer = (
        frame.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
        .option("checkpointLocation", checkpoint)
    )
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    query = writer.trigger(processingTime="100 milliseconds").start()
    data_batches = -(-rows // rows_per_batch)  # ceil
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and query.exception() is None:
            progress = query.lastProgress
            # One empty batch after the data batches: everything up to `rows` has been committed.
            if progress and progress["batchId"] >= data_batches:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"stream did not get past {data_batches} batches in {timeout}s: "
                                 f"{query.exception() or query.lastProgress}")
    finally:
        query.stop()
    return query
