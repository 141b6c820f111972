"""The `kqp-kafka` Spark data source: a Kafka sink for PySpark that needs no connector jars.

Spark 4's Python Data Source API (`pyspark.sql.datasource`) runs Python writers inside Spark's
own write path, batch and streaming, so a job gets a Kafka sink from this module alone, where
Spark's built-in sink needs `spark-sql-kafka` on every classpath. `kqp.spark.register(spark)` once
per session, then `format("kqp-kafka")` with the built-in sink's options.

The shape follows the API: the DataSource (driver) checks options and schema once and builds a
picklable plan; each task's `write` runs `task_writer.write_messages` with its own idempotent
producer and returns a KafkaCommitMessage; the driver's `commit` (per job, or per micro-batch)
sums them and, when `kqp.commitLog` names a file, appends one JSON line per commit or abort. Writers
take pyarrow batches (`DataSourceArrowWriter`): Spark hands data over as Arrow anyway, and
converting whole columns is cheaper than a Row per record.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kqp.spark import FORMAT
from kqp.spark.options import SinkOptions, parse_sink_options
from kqp.spark.rows import MessageEncoder, arrow_rows
from kqp.spark.task_writer import write_messages

try:  # Spark >= 4.1: streaming writers can take Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_TAKES_ARROW = True
except ImportError:  # Spark 4.0: streaming writers get Rows
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc, assignment]
    _STREAM_TAKES_ARROW = False

log = logging.getLogger("kqp.spark")


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """One task's report to the driver: every row counted here was acknowledged by Kafka."""

    rows: int
    bytes: int
    throttle_events: int
    throttle_seconds: float
    seconds: float


@dataclass(frozen=True)
class WritePlan:
    """Everything a task needs, decided on the driver and pickled to the executors."""

    options: SinkOptions
    encoder: MessageEncoder

    @classmethod
    def build(cls, options: Any, schema: StructType) -> WritePlan:
        sink_options = parse_sink_options(options)
        fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        return cls(sink_options, MessageEncoder.for_schema(fields, sink_options.topic))

    def write_rows(self, rows: Any) -> KafkaCommitMessage:
        stats = write_messages(self.encoder.encode_all(rows), self.options.producer_config)
        return KafkaCommitMessage(
            rows=stats.rows,
            bytes=stats.bytes,
            throttle_events=stats.throttle_events,
            throttle_seconds=stats.throttle_seconds,
            seconds=stats.seconds,
        )

    def record(self, outcome: str, messages: Sequence[KafkaCommitMessage | None], batch_id: int | None) -> dict:
        """Sum the tasks' reports, log them, and append them to the commit log if one is set."""
        done = [m for m in messages if m is not None]
        summary = {
            "outcome": outcome,
            "batch_id": batch_id,
            "tasks": len(messages),
            "failed_tasks": len(messages) - len(done),
            "rows": sum(m.rows for m in done),
            "bytes": sum(m.bytes for m in done),
            "throttle_events": sum(m.throttle_events for m in done),
            "throttle_seconds": sum(m.throttle_seconds for m in done),
            "task_seconds": sum(m.seconds for m in done),
            "client_id": self.options.client_id,
            "time": time.time(),
        }
        level = logging.INFO if outcome == "commit" else logging.WARNING
        log.log(level, "kqp-kafka %s: %s", outcome, json.dumps(summary))
        if self.options.commit_log:
            with open(self.options.commit_log, "a", encoding="utf-8") as f:
                f.write(json.dumps(summary) + "\n")
        return summary


class KafkaBatchWriter(DataSourceArrowWriter):
    """`df.write.format("kqp-kafka")`: one producer per task; the job commits when all tasks did."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return self.plan.write_rows(arrow_rows(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.plan.record("commit", messages, None)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        # Kafka has no undo: rows of tasks that succeeded stay written (at-least-once, as the
        # built-in sink); the abort line says how many.
        self.plan.record("abort", messages, None)  # type: ignore[arg-type]


class KafkaStreamWriter(_StreamWriterBase):  # type: ignore[misc, valid-type]
    """`writeStream.format("kqp-kafka")`: the same task write, committed per micro-batch."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        rows = arrow_rows(iterator) if _STREAM_TAKES_ARROW else iterator
        return self.plan.write_rows(rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.plan.record("commit", messages, batchId)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.plan.record("abort", messages, batchId)  # type: ignore[arg-type]


class KafkaSinkDataSource(DataSource):
    """The data source registered as `kqp-kafka`; write-only, like a sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(WritePlan.build(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(WritePlan.build(self.options, schema))


def register(spark: Any) -> str:
    """Register the sink with a SparkSession; returns the format name to use ("kqp-kafka")."""
    spark.dataSource.register(KafkaSinkDataSource)
    return FORMAT

