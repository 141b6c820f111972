"""The kqp-kafka sink in a real local Spark, writing straight to the mock cluster (no kqp).

This pins the sink's own behaviour (tasks, columns, commits, failures) apart from the proxy;
test_sink_through_kqp.py runs the same writes through kqp with a quota.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_checks import assert_exactly_once, assigned_consumer, consume_keys, run_stream

from kqp.spark.demo import demo_frame, read_commit_log, write_batch
from kqp.spark.rows import HEADERS_TYPE

ROWS = 100_000


def test_batch_write_of_100k_rows_in_four_tasks(spark: Any, kafka_bootstrap: str, topic: str,
                                                 tmp_path: Path) -> None:
    log = tmp_path / "commits.jsonl"
    df = demo_frame(spark, ROWS, value_bytes=20, partitions=4)
    write_batch(df, kafka_bootstrap, topic, options={"kqp.commitLog": str(log), "kafka.client.id": "direct"})
    [commit] = read_commit_log(log)
    assert commit["outcome"] == "commit"
    assert (commit["tasks"], commit["failed_tasks"], commit["rows"]) == (4, 0, ROWS)
    assert commit["client_id"] == "direct"
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, ROWS), ROWS)


def test_topic_partition_and_headers_columns(spark: Any, kafka_bootstrap: str, topic: str) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("topic", StringType()), StructField("key", BinaryType()), StructField("value", StringType()),
        StructField("partition", IntegerType()), StructField("headers", ArrayType(header)),
    ])
    other = topic + "-b"
    rows = [
        (topic, b"k0", "v0", 2, [("trace", bytearray(b"abc"))]),
        (other, b"k1", "v1", 3, None),
    ]
    df = spark.createDataFrame(rows, schema)
    assert dict((f.name, f.dataType.simpleString()) for f in df.schema.fields)["headers"] == HEADERS_TYPE
    # No `topic` option: each row's topic column decides.
    df.write.format("kqp-kafka").option("kafka.bootstrap.servers", kafka_bootstrap).mode("append").save()
    consumer = assigned_consumer(kafka_bootstrap, [topic, other])
    try:
        got: dict[bytes, Any] = {}
        for _ in range(40):
            for m in consumer.consume(10, 0.5):
                assert not m.error()
                got[m.key()] = (m.topic(), m.partition(), m.value(), m.headers())
            if len(got) == 2:
                break
    finally:
        consumer.close()
    assert got == {
        b"k0": (topic, 2, b"v0", [("trace", b"abc")]),
        b"k1": (other, 3, b"v1", None),
    }


def test_a_bad_schema_fails_on_the_driver_with_the_column_named(spark: Any, kafka_bootstrap: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as key")
    with pytest.raises(Exception, match="required column 'value' not found"):
        write_batch(df, kafka_bootstrap, "never-written")


def test_undeliverable_rows_fail_the_job(spark: Any, tmp_path: Path) -> None:
    from helpers.net import free_port

    log = tmp_path / "commits.jsonl"
    df = demo_frame(spark, 10, partitions=1)
    # Nothing listens there: librdkafka gives up after message.timeout.ms and reports each message.
    options = {"kafka.message.timeout.ms": "1500", "kqp.commitLog": str(log)}
    with pytest.raises(Exception, match="Kafka delivery error"):
        write_batch(df, f"127.0.0.1:{free_port()}", "unreachable", options=options)
    [abort] = read_commit_log(log)
    assert (abort["outcome"], abort["failed_tasks"], abort["rows"]) == ("abort", 1, 0)


def test_streaming_query_commits_each_micro_batch(spark: Any, kafka_bootstrap: str, topic: str,
                                                  tmp_path: Path) -> None:
    log = tmp_path / "commits.jsonl"
    rows, per_batch = 20_000, 5_000
    query = run_stream(spark, kafka_bootstrap, topic, str(tmp_path / "checkpoint"),
                       rows=rows, rows_per_batch=per_batch, options={"kqp.commitLog": str(log)})
    assert query.exception() is None and not query.isActive
    commits = [c for c in read_commit_log(log) if c["outcome"] == "commit"]
    by_batch = {c["batch_id"]: c["rows"] for c in commits}
    # Four data batches of 5000 rows each, committed one by one; later batches are empty.
    assert [by_batch[b] for b in range(4)] == [per_batch] * 4
    assert sum(by_batch.values()) == rows
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, rows), rows)
