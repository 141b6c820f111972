"""Spark's own Kafka connector through kqp to Apache Kafka: the built-in `kafka` sink and source.

The shared SparkSession (conftest) carries the spark-sql-kafka-0-10 jars, so these jobs run as a
user's would: Spark's Java client, `kafka.`-prefixed options, one `kafka.client.id` per job, under
a `client_id_prefix` quota (the entity for client ids that carry more than the job's name). Each
test has its own kqp, with a wire tap between kqp and Kafka (helpers.quota_path) to judge the wire:
- a batch write (deploy/spark/job.py's, `--sink builtin`) finishes, every key reaches Kafka once,
  kqp throttled it, and after the first span Kafka received the quota's rate (least-squares slope
  of the cumulative Produce bytes, over several 1.1 s spans of 0.1 s windows);
- a streaming write with a checkpoint runs its micro-batches throttled and stops cleanly, every key
  once across the batches;
- a batch read, earliest to latest, under a consumer quota, gets every record once.
"""

from __future__ import annotations

import contextlib
import re
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers.names import unique_topic
from helpers.quota_analysis import cumulative_slope, request_events
from helpers.quota_path import QuotaPath, open_quota_path
from helpers.topics import create_topic
from kafka.protocol.api_key import ApiKey
from spark_checks import (
    STREAM_QUOTA_BYTES_PER_SECOND,
    STREAM_ROWS_PER_BATCH,
    WINDOW_SECONDS,
    assert_exactly_once,
    consume_keys,
    deploy_job,
    kqp_throttle_seconds,
    run_stream,
)
from upstreams.launch import Upstream

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "spark-builtin-"        # the quota entity: every client id starting so is one group
WINDOW, WINDOWS = 0.1, 11        # a 1.1 s span: a short first burst, then several spans to judge
SPAN = WINDOW * WINDOWS
QUOTA = 300_000                  # bytes/s: the batch job's producer_byte_rate
# ~2 MB of Produce frames: ~0.3 MB go in the first burst, the rest take ~6 s, five spans.
ROWS, VALUE_BYTES = 60_000, 20
RATIO = (0.7, 1.15)              # rate after the first span / quota (Kafka's sawtooth, a busy machine)
# ~2 MB of Fetch responses against 600 kB/s: ~0.6 MB in the first burst, then a few seconds throttled.
READ_RECORDS, READ_VALUE, READ_QUOTA = 20_000, b"v" * 80, 600_000


@pytest.fixture
def builtin(spark: Any, spark_kafka_jars: list[str], kafka: Upstream) -> tuple[Any, Upstream]:
    """The shared session and Apache Kafka; a skip where the connector could not be resolved."""
    if not spark_kafka_jars:
        pytest.skip("Spark's Kafka connector is not on the class path: Maven is missing "
                    "(install it, or name a folder of the connector's jars in KQP_SPARK_KAFKA_JARS)")
    return spark, kafka


@pytest.fixture
def quota_path(kqp: Callable[..., Any], kafka: Upstream) -> Iterator[Callable[[dict[str, Any]], QuotaPath]]:
    """Factory: a kqp with these quotas in front of Kafka, taps on both sides, its metrics endpoint."""
    with contextlib.ExitStack() as stack:
        yield lambda quotas: open_quota_path(stack, kqp, kafka, quotas, metrics={"listen": "127.0.0.1:0"})


def prefix_quota(window: float, **rates: int) -> dict[str, Any]:
    return {"window_size_seconds": window, "window_count": WINDOWS,
            "entities": [{"client_id_prefix": PREFIX, **rates}]}


def test_the_connector_pom_and_the_spark_extra_pin_one_version() -> None:
    """tests/jvm/spark-kafka/pom.xml and pyproject's `spark` extra name one Spark version: the
    connector's classes are built against that exact Spark."""
    pom = (ROOT / "tests" / "jvm" / "spark-kafka" / "pom.xml").read_text()
    [connector] = re.findall(r"<spark\.version>([^<]+)</spark\.version>", pom)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    assert f"pyspark=={connector}" in extra
    with contextlib.suppress(ImportError):   # where the extra is installed, it is that version
        assert version("pyspark") == connector


def test_builtin_sink_batch_write_holds_a_prefix_quota_and_writes_every_key_once(
        builtin: tuple[Any, Upstream], quota_path: Callable[[dict[str, Any]], QuotaPath]) -> None:
    spark, kafka = builtin
    path = quota_path(prefix_quota(WINDOW, producer_byte_rate=QUOTA))
    client_id, topic = f"{PREFIX}batch-{uuid.uuid4().hex[:6]}", unique_topic("spark-builtin")
    create_topic(kafka, topic, 4)
    job = deploy_job()
    args = job.parse_args(["--sink", "builtin", "--bootstrap", path.bootstrap, "--topic", topic,
                           "--client-id", client_id, "--rows", str(ROWS), "--value-bytes", str(VALUE_BYTES)])
    summary = job.run_batch(spark, args, "kafka")
    assert (summary["sink"], summary["rows"], summary["client_id"]) == ("kafka", ROWS, client_id)

    assert_exactly_once(consume_keys(kafka, topic, ROWS), ROWS)
    assert kqp_throttle_seconds(path.kqp, client_id) > 0
    events = request_events(r for r in path.upstream_tap.requests(api_key=ApiKey.Produce) if r.client_id == client_id)
    start, end = events[0][0] + SPAN, events[-1][0]
    assert end - start >= 2.5 * SPAN, f"only {end - start:.1f} s of writing after the first span"
    ratio = cumulative_slope(events, start, end) / QUOTA
    print(f"\nBUILTIN batch: {sum(size for _, size in events)} bytes in {len(events)} Produce requests over "
          f"{events[-1][0] - events[0][0]:.1f} s, after the first span {ratio:.2f} x the quota")
    assert RATIO[0] <= ratio <= RATIO[1], f"Kafka received {ratio:.2f} x the quota after the first span"


def test_builtin_sink_streaming_query_writes_every_key_once_across_micro_batches(
        builtin: tuple[Any, Upstream], quota_path: Callable[[dict[str, Any]], QuotaPath], tmp_path: Path) -> None:
    spark, kafka = builtin
    # The quota and batch size of the jar-free sink's throttled stream (spark_checks): each batch
    # alone is over the quota, so each is throttled; two batches show nothing lost or repeated across.
    path = quota_path(prefix_quota(WINDOW_SECONDS, producer_byte_rate=STREAM_QUOTA_BYTES_PER_SECOND))
    client_id, topic = f"{PREFIX}stream-{uuid.uuid4().hex[:6]}", unique_topic("spark-builtin-stream")
    create_topic(kafka, topic, 4)
    rows, per_batch = 2 * STREAM_ROWS_PER_BATCH, STREAM_ROWS_PER_BATCH
    query: Any = run_stream(spark, path.bootstrap, topic, str(tmp_path / "checkpoint"), rows=rows,
                            rows_per_batch=per_batch, fmt="kafka", options={"kafka.client.id": client_id})
    assert query.exception() is None and not query.isActive
    batches = {p["batchId"]: p["numInputRows"] for p in query.recentProgress}
    assert [batches[b] for b in range(rows // per_batch)] == [per_batch] * (rows // per_batch), batches
    assert_exactly_once(consume_keys(kafka, topic, rows), rows)
    assert kqp_throttle_seconds(path.kqp, client_id) > 0


def test_builtin_source_batch_read_gets_every_record_once(
        builtin: tuple[Any, Upstream], quota_path: Callable[[dict[str, Any]], QuotaPath]) -> None:
    spark, kafka = builtin
    path = quota_path(prefix_quota(WINDOW, consumer_byte_rate=READ_QUOTA))
    client_id, topic = f"{PREFIX}read-{uuid.uuid4().hex[:6]}", unique_topic("spark-builtin-read")
    create_topic(kafka, topic, 4)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 20})   # straight to Kafka
    for i in range(READ_RECORDS):
        producer.produce(topic, key=str(i).encode(), value=READ_VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0

    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", path.bootstrap)
             .option("kafka.client.id", client_id).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    rows = frame.selectExpr("CAST(key AS STRING) AS key", "value").collect()
    assert_exactly_once(Counter(row["key"].encode() for row in rows), READ_RECORDS)
    assert {bytes(row["value"]) for row in rows} == {READ_VALUE}
    # Spark's executors fetch with the job's client id: the prefix group's consumer quota held them.
    assert {r.client_id for r in path.upstream_tap.requests(api_key=ApiKey.Fetch)} == {client_id}
    assert kqp_throttle_seconds(path.kqp, client_id) > 0
