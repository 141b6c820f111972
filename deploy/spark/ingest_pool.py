"""Three Spark jobs writing through kqp at once, sharing one capacity pool (issue 21).

    kqp run --config deploy/spark/kqp-ingest-pool.yaml --upstream broker:9092
    python deploy/spark/ingest_pool.py --bootstrap 127.0.0.1:19092 --rows 200000

Each job writes `--rows` rows with the jar-free `kqp-kafka` sink under its own client id
(`ingest-a-etl`, `ingest-b-etl`, `ingest-c-etl`), all three at once: three Spark jobs of one
application here, on threads, with the FAIR scheduler so that their tasks run side by side; in
production they are three applications, and kqp sees the same three members. The pool in
kqp-ingest-pool.yaml gives job a three times b's and c's share while all three write, and hands a
job's share to the others once it is done. Prints one JSON line per job when it finishes, from the
sink's commit log: rows, bytes, the seconds its task spent writing (Spark's own start-up aside),
bytes/s, and the throttle time kqp gave it; then one line for all three.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

JOBS = ("ingest-a-etl", "ingest-b-etl", "ingest-c-etl")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers: kqp's listener")
    p.add_argument("--topic", default="ingest")
    p.add_argument("--rows", type=int, default=200_000, help="rows each job writes")
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--master", default="local[3]", help="one task slot per job")
    return p.parse_args(argv)


def run_jobs(spark: object, args: argparse.Namespace) -> list[dict[str, object]]:
    from kqp.spark import register
    from kqp.spark.demo import demo_frame, read_commit_log, write_batch

    fmt = register(spark)
    results: list[dict[str, object]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    logs = Path(tempfile.mkdtemp(prefix="kqp-ingest-pool-"))

    def job(client_id: str) -> None:
        try:
            # The JVM keeps the active session per thread: the sink registered on it is found only there.
            spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)   # type: ignore[attr-defined]
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", client_id)   # type: ignore[attr-defined]
            df = demo_frame(spark, args.rows, value_bytes=args.value_bytes, partitions=1)
            log = logs / f"{client_id}.jsonl"
            write_batch(df, args.bootstrap, f"{args.topic}-{client_id}", fmt=fmt,
                        options={"kafka.client.id": client_id, "kafka.linger.ms": "20", "kqp.commitLog": str(log)})
            [commit] = read_commit_log(log)
            seconds = commit["task_seconds"]
            result = {"job": client_id, "rows": commit["rows"], "bytes": commit["bytes"],
                      "write_seconds": round(seconds, 2), "bytes_per_second": round(commit["bytes"] / seconds),
                      "throttle_seconds": round(commit["throttle_seconds"], 2)}
            with lock:
                results.append(result)
            print(json.dumps(result), flush=True)
        except BaseException as exc:   # reported by the main thread
            failures.append(exc)

    from pyspark import InheritableThread  # carries the session's state to the job's thread

    threads = [InheritableThread(target=job, args=(client_id,)) for client_id in JOBS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results


def main(argv: list[str] | None = None) -> int:
    from kqp.spark.session import local_session

    args = parse_args(argv)
    spark = local_session("kqp-ingest-pool", args.master, {"spark.scheduler.mode": "FAIR"})
    try:
        results = run_jobs(spark, args)
    finally:
        spark.stop()  # type: ignore[attr-defined]
    print(json.dumps({"jobs": len(results), "rows": sum(r["rows"] for r in results),   # type: ignore[misc]
                      "bytes": sum(r["bytes"] for r in results)}), flush=True)   # type: ignore[misc]
    return 0


if __name__ == "__main__":
    sys.exit(main())
