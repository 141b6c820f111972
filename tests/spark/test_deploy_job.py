"""deploy/spark/job.py, the pipeline the compose stack and the Kubernetes examples run: its functions,
in the shared SparkSession (its built-in sink's batch write is in test_builtin_connector.py)."""

from __future__ import annotations

import json
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from spark_checks import consume_keys, deploy_job


def test_builtin_sink_takes_its_connector_from_a_folder_or_from_maven_at_pysparks_version(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    job = deploy_job()
    args = ["--bootstrap", "127.0.0.1:1", "--sink", "builtin"]
    pyspark = version("pyspark")
    assert job.session_conf(job.parse_args(args)) == \
        {"spark.jars.packages": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark}"}
    for name in ("kafka-clients.jar", "spark-sql-kafka.jar", "notes.txt"):
        (tmp_path / name).touch()
    assert job.session_conf(job.parse_args([*args, "--jars", str(tmp_path)])) == \
        {"spark.jars": f"{tmp_path / 'kafka-clients.jar'},{tmp_path / 'spark-sql-kafka.jar'}"}
    assert job.session_conf(job.parse_args(args[:2])) == {}   # kqp's sink needs no jars
    with pytest.raises(SystemExit, match=r"no \.jar files"):
        job.session_conf(job.parse_args([*args, "--jars", str(tmp_path / "none")]))


def test_stream_mode_runs_micro_batches_and_stops(spark: Any, kafka_bootstrap: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    job = deploy_job()
    topic = f"job-{uuid.uuid4().hex[:8]}"
    # The compose stack's spark-job command, shortened, in the shared session (a JVM of its own
    # would cost CI some 20 s): a rate source for three micro-batches (--seconds only bounds a
    # stuck run: a loaded CI box may take a while for the first batch).
    args = job.parse_args(["--bootstrap", kafka_bootstrap, "--topic", topic, "--client-id", "job-test",
                           "--mode", "stream", "--rows-per-second", "2000", "--value-bytes", "50",
                           "--max-batches", "3", "--seconds", "240"])
    summary = job.run_stream(spark, args, "kqp-kafka")
    progress = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert summary["sink"] == "kqp-kafka" and summary["client_id"] == "job-test"
    assert summary["batches"] == 3 and len(progress) == 3, progress
    written = consume_keys(kafka_bootstrap, topic, expected=1, timeout=20)
    assert written and max(written.values()) == 1
