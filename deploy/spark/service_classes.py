"""A streaming query and two batch jobs through kqp at once, one pool, the stream's class first.

    kqp run --config deploy/spark/kqp-service-classes.yaml --upstream broker:9092
    python deploy/spark/service_classes.py --bootstrap 127.0.0.1:19092 --rows 200000

The streaming query (`ingest-stream-orders`) writes a rate source's rows every second with the
jar-free `kqp-kafka` sink; two batch jobs (`ingest-batch-a`, `ingest-batch-b`) write `--rows` rows
each at the same time: three Spark jobs of one application here, on threads, with the FAIR
scheduler; in production three applications, and kqp sees the same members. The pool in
kqp-service-classes.yaml serves the stream's class first: its micro-batches are written at once,
unthrottled, while the batch jobs share what it leaves. Prints one JSON line per micro-batch and per
batch job from the sink's commit log (rows, bytes, the seconds its tasks spent writing, the
throttle time kqp gave them), then one line for the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STREAM = "ingest-stream-orders"
BATCH = ("ingest-batch-a", "ingest-batch-b")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers: kqp's listener")
    p.add_argument("--topic", default="ingest")
    p.add_argument("--rows", type=int, default=200_000, help="rows each batch job writes")
    p.add_argument("--rows-per-second", type=int, default=500, help="the streaming query's rate source")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--master", default="local[3]", help="one task slot per job")
    return p.parse_args(argv)


def _commits(path: Path) -> list[dict[str, Any]]:
    from kqp.spark.demo import read_commit_log

    return [c for c in read_commit_log(path) if c["outcome"] == "commit"]


def _line(job: str, commit: dict[str, Any]) -> dict[str, Any]:
    seconds = commit["task_seconds"]
    return {"job": job, "rows": commit["rows"], "bytes": commit["bytes"], "write_seconds": round(seconds, 3),
            "throttle_seconds": round(commit["throttle_seconds"], 3)}


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    from pyspark import InheritableThread  # carries the session's state to the job's thread
    from pyspark.sql import functions as F

    from kqp.spark import register
    from kqp.spark.demo import demo_frame, write_batch

    fmt = register(spark)
    logs = Path(tempfile.mkdtemp(prefix="kqp-service-classes-"))
    options = {"kafka.linger.ms": "20"}
    stream_log = logs / f"{STREAM}.jsonl"
    frame = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()
             .select(F.col("value").cast("string").alias("key"),
                     F.lpad(F.col("value").cast("string"), args.value_bytes, "v").alias("value")))
    writer = (frame.writeStream.format(fmt).option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", f"{args.topic}-stream").option("checkpointLocation", str(logs / "checkpoint"))
              .option("kafka.client.id", STREAM).option("kqp.commitLog", str(stream_log)))
    for key, value in options.items():
        writer = writer.option(key, value)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", STREAM)
    query = writer.trigger(processingTime="1 second").start()
    failures: list[BaseException] = []
    batches: list[dict[str, Any]] = []

    def job(client_id: str) -> None:
        try:
            spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", client_id)
            log = logs / f"{client_id}.jsonl"
            write_batch(demo_frame(spark, args.rows, value_bytes=args.value_bytes, partitions=1), args.bootstrap,
                        f"{args.topic}-{client_id}", fmt=fmt,
                        options={**options, "kafka.client.id": client_id, "kqp.commitLog": str(log)})
            [commit] = _commits(log)
            batches.append(_line(client_id, commit))
            print(json.dumps(batches[-1]), flush=True)
        except BaseException as exc:   # reported by the main thread
            failures.append(exc)

    try:
        while not _commits(stream_log) and query.isActive:   # the stream first, as a streaming job runs all day
            time.sleep(0.2)
        threads = [InheritableThread(target=job, args=(client_id,)) for client_id in BATCH]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(2.0)   # a micro-batch or two with the batch jobs done
    finally:
        query.stop()
    if failures:
        raise failures[0]
    if query.exception():
        raise RuntimeError(str(query.exception()))
    stream = [_line(STREAM, c) for c in _commits(stream_log)]
    for line in stream:
        print(json.dumps({**line, "micro_batch": True}), flush=True)
    return {"micro_batches": len(stream), "stream_rows": sum(s["rows"] for s in stream),
            "stream_throttle_seconds": round(sum(s["throttle_seconds"] for s in stream), 3),
            "stream_write_seconds_max": max((s["write_seconds"] for s in stream), default=0.0),
            "batch_rows": sum(b["rows"] for b in batches),
            "batch_throttle_seconds": round(sum(b["throttle_seconds"] for b in batches), 3)}


def main(argv: list[str] | None = None) -> int:
    from kqp.spark.session import local_session

    args = parse_args(argv)
    spark = local_session("kqp-service-classes", args.master, {"spark.scheduler.mode": "FAIR"})
    try:
        summary = run(spark, args)
    finally:
        spark.stop()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
