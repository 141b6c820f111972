"""Spark's built-in Kafka sink through kqp, throttled: the way most users will run it.

Its connector jars (spark-sql-kafka-0-10, kafka-clients, spark-token-provider-kafka,
commons-pool2, for this Spark's Scala version) come from Maven, which these machines cannot
reach: the test runs when KQP_SPARK_KAFKA_JARS names a folder holding them and is skipped with
that reason otherwise. The job is deploy/spark/job.py in its own process, since jars must be on
the classpath when the JVM starts; the checks are those of the kqp-kafka sink's throttled test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from spark_checks import BUILTIN_CLIENT, assert_exactly_once, consume_keys, kqp_throttle_seconds

from kqp.spark.session import spark_missing_reason

JOB = Path(__file__).resolve().parents[2] / "deploy" / "spark" / "job.py"
ROWS = 100_000

# Decided before any fixture starts a cluster or kqp for nothing.
pytestmark = pytest.mark.skipif(
    not os.environ.get("KQP_SPARK_KAFKA_JARS"),
    reason="KQP_SPARK_KAFKA_JARS is not set: Spark's built-in Kafka sink needs the spark-sql-kafka-0-10 "
           "connector jars from Maven, which this machine cannot reach",
)


def jars_folder() -> str:
    folder = os.environ["KQP_SPARK_KAFKA_JARS"]
    if not list(Path(folder).glob("*.jar")):
        pytest.fail(f"KQP_SPARK_KAFKA_JARS={folder} holds no .jar files")
    reason = spark_missing_reason()
    if reason:
        pytest.skip(f"Spark cannot run here: {reason}")
    return folder


def test_builtin_sink_throttled_write_finishes_exactly_once(kafka_bootstrap: str, throttling_kqp: Any) -> None:
    jars = jars_folder()
    topic = f"spark-builtin-{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        [sys.executable, str(JOB), "--sink", "builtin", "--jars", jars, "--master", "local[2]",
         "--bootstrap", throttling_kqp.bootstrap, "--topic", topic, "--client-id", BUILTIN_CLIENT,
         "--rows", str(ROWS), "--value-bytes", "20", "--partitions", "4"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["sink"], summary["rows"]) == ("kafka", ROWS)
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, ROWS), ROWS)
    assert kqp_throttle_seconds(throttling_kqp, BUILTIN_CLIENT) > 0
