"""A PySpark job that writes keyed rows to Kafka through kqp, with either Kafka sink.

    python deploy/spark/job.py --bootstrap 127.0.0.1:19092 --topic events --client-id orders-etl
    python deploy/spark/job.py --sink builtin ...      # Spark's own sink (add --jars FOLDER offline)
    python deploy/spark/job.py --mode stream --rows-per-second 20000 --seconds 300 ...

`--sink builtin` is Spark's `kafka` sink; its connector (spark-sql-kafka-0-10 at pyspark's version)
comes from `--jars FOLDER` (with kafka-clients, spark-token-provider-kafka, commons-pool2) or else
from Maven Central (`spark.jars.packages`; under spark-submit, give spark-submit `--packages`).
`--sink kqp` (default) is kqp's jar-free `kqp-kafka` sink. Same options, same DataFrame (key, value).
Batch mode writes `--rows` rows (keys "0".."rows-1") and prints one JSON line: rows, seconds,
rows/s. Stream mode runs a rate source into the sink for `--seconds` (0 = until stopped) or
`--max-batches` micro-batches, with a checkpoint, and prints each batch's progress. Under
spark-submit in a cluster leave `--master` out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"   # Spark 4 is built for Scala 2.13 only


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers: kqp's listener")
    p.add_argument("--topic", default="spark-events")
    p.add_argument("--client-id", default="spark-job", help="kafka.client.id: the job's quota entity")
    p.add_argument("--sink", choices=["kqp", "builtin"], default="kqp")
    p.add_argument("--jars", help="--sink builtin: a folder of the connector's jars (default: "
                                  "spark.jars.packages from Maven Central)")
    p.add_argument("--mode", choices=["batch", "stream"], default="batch")
    p.add_argument("--rows", type=int, default=100_000, help="batch mode: rows to write")
    p.add_argument("--partitions", type=int, default=4, help="batch mode: write tasks")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--rows-per-second", type=int, default=10_000, help="stream mode: rate source speed")
    p.add_argument("--seconds", type=float, default=60.0, help="stream mode: run time, 0 = forever")
    p.add_argument("--max-batches", type=int, default=0,
                   help="stream mode: stop after this many micro-batches (0 = no limit)")
    p.add_argument("--checkpoint", help="stream mode: checkpoint folder (default: a temporary one)")
    p.add_argument("--master", help="default: spark-submit's master, or local[*] under plain python")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra sink option, e.g. kafka.linger.ms=50 (repeatable)")
    return p.parse_args(argv)


def session_conf(args: argparse.Namespace) -> dict[str, str]:
    """The SparkSession settings the chosen sink needs: for the built-in one, its connector."""
    if args.sink != "builtin":
        return {}
    if not args.jars:
        # The connector at pyspark's own version: Spark's Kafka classes change between releases.
        return {"spark.jars.packages": f"{CONNECTOR}:{version('pyspark')}"}
    jars = sorted(str(p) for p in Path(args.jars).glob("*.jar"))
    if not jars:
        raise SystemExit(f"no .jar files in {args.jars}")
    return {"spark.jars": ",".join(jars)}


def session(args: argparse.Namespace) -> object:
    from kqp.spark.session import local_session

    return local_session(f"kqp-{args.sink}-sink-{args.client_id}", args.master, session_conf(args))


def sink_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"kafka.client.id": args.client_id}
    for item in args.option:
        key, _, value = item.partition("=")
        options[key] = value
    return options


def run_batch(spark: object, args: argparse.Namespace, fmt: str) -> dict[str, object]:
    from kqp.spark.demo import demo_frame, write_batch

    df = demo_frame(spark, args.rows, value_bytes=args.value_bytes, partitions=args.partitions)
    started = time.monotonic()
    write_batch(df, args.bootstrap, args.topic, fmt=fmt, options=sink_options(args))
    seconds = time.monotonic() - started
    return {"sink": fmt, "rows": args.rows, "seconds": round(seconds, 3),
            "rows_per_second": round(args.rows / seconds, 1), "client_id": args.client_id}


def run_stream(spark: object, args: argparse.Namespace, fmt: str) -> dict[str, object]:
    from pyspark.sql import functions as F

    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="kqp-spark-checkpoint-")
    frame = (
        spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()  # type: ignore[attr-defined]
        .select(F.col("value").cast("string").alias("key"),
                F.lpad(F.col("value").cast("string"), args.value_bytes, "v").alias("value"))
    )
    writer = (frame.writeStream.format(fmt).option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.topic).option("checkpointLocation", checkpoint))
    for key, value in sink_options(args).items():
        writer = writer.option(key, value)
    query = writer.trigger(processingTime="1 second").start()
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    last = -1
    try:
        while query.isActive and time.monotonic() < deadline:
            if args.max_batches and last + 1 >= args.max_batches:
                break
            progress = query.lastProgress
            if progress and progress["batchId"] != last:
                last = progress["batchId"]
                print(json.dumps({"batch": last, "rows": progress["numInputRows"],
                                  "rows_per_second": progress.get("processedRowsPerSecond")}), flush=True)
            time.sleep(0.2)
    finally:
        query.stop()
    if query.exception():
        raise RuntimeError(str(query.exception()))
    return {"sink": fmt, "batches": last + 1, "checkpoint": checkpoint, "client_id": args.client_id}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = session(args)
    try:
        fmt = "kafka"
        if args.sink == "kqp":
            from kqp.spark import register

            fmt = register(spark)
        result = run_batch(spark, args, fmt) if args.mode == "batch" else run_stream(spark, args, fmt)
    finally:
        spark.stop()  # type: ignore[attr-defined]
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
