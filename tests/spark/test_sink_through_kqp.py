"""PySpark writes through kqp with a producer quota low enough to throttle for many windows.

This is the failure KIP-219 was written for: a job far above its quota must still finish. kqp
answers each Produce with throttle_time_ms and mutes the connection; librdkafka in each Spark task
backs off, its queue fills, the sink's produce loop waits, and the task completes. The checks:
the job succeeds, the upstream holds each of the 100k keys exactly once (read directly from the
upstream, so kqp's Fetch path is not under test here), the tasks themselves saw throttle time
(the sink's commit log), and kqp's `kqp_throttle_seconds_total` for the job's client id is > 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_checks import (
    BATCH_CLIENT,
    STREAM_CLIENT,
    STREAM_ROWS,
    STREAM_ROWS_PER_BATCH,
    assert_exactly_once,
    consume_keys,
    kqp_throttle_seconds,
    run_stream,
)

from kqp.spark.demo import demo_frame, read_commit_log, write_batch

ROWS = 100_000
VALUE_BYTES = 20


def test_throttled_batch_write_of_100k_rows_finishes_exactly_once(
        spark: Any, kafka_bootstrap: str, throttling_kqp: Any, topic: str, tmp_path: Path) -> None:
    log = tmp_path / "commits.jsonl"
    df = demo_frame(spark, ROWS, value_bytes=VALUE_BYTES, partitions=4)
    options = {"kafka.client.id": BATCH_CLIENT, "kqp.commitLog": str(log)}
    write_batch(df, throttling_kqp.bootstrap, topic, options=options)
    [commit] = read_commit_log(log)
    assert (commit["outcome"], commit["tasks"], commit["failed_tasks"], commit["rows"]) == ("commit", 4, 0, ROWS)
    # The Spark tasks saw KIP-219 throttle time in Produce responses (librdkafka's throttle_cb).
    assert commit["throttle_events"] > 0 and commit["throttle_seconds"] > 0
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, ROWS), ROWS)
    assert kqp_throttle_seconds(throttling_kqp, BATCH_CLIENT) > 0


def test_throttled_streaming_query_commits_each_micro_batch_and_stops_cleanly(
        spark: Any, kafka_bootstrap: str, throttling_kqp: Any, topic: str, tmp_path: Path) -> None:
    log = tmp_path / "commits.jsonl"
    rows, per_batch = STREAM_ROWS, STREAM_ROWS_PER_BATCH
    options = {"kafka.client.id": STREAM_CLIENT, "kqp.commitLog": str(log)}
    query = run_stream(spark, throttling_kqp.bootstrap, topic, str(tmp_path / "checkpoint"),
                       rows=rows, rows_per_batch=per_batch, options=options)
    assert query.exception() is None and not query.isActive
    commits = [c for c in read_commit_log(log) if c["outcome"] == "commit"]
    by_batch = {c["batch_id"]: c["rows"] for c in commits}
    assert [by_batch[b] for b in range(rows // per_batch)] == [per_batch] * (rows // per_batch)
    assert sum(c["throttle_events"] for c in commits) > 0
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, rows), rows)
    assert kqp_throttle_seconds(throttling_kqp, STREAM_CLIENT) > 0
