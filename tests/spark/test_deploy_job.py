"""deploy/spark/job.py, the pipeline the compose stack and the Kubernetes examples run."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from spark_checks import consume_keys

from kqp.spark.session import spark_missing_reason

JOB = Path(__file__).resolve().parents[2] / "deploy" / "spark" / "job.py"


def run_job(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_builtin_sink_without_jars_is_refused_before_spark_starts() -> None:
    result = run_job("--bootstrap", "127.0.0.1:1", "--sink", "builtin", timeout=60)
    assert result.returncode != 0
    assert "--sink builtin needs --jars FOLDER" in result.stderr


def test_stream_mode_runs_micro_batches_and_stops(kafka_bootstrap: str) -> None:
    reason = spark_missing_reason()
    if reason:
        pytest.skip(f"Spark cannot run here: {reason}")
    topic = f"job-{uuid.uuid4().hex[:8]}"
    # The compose stack's spark-job command, shortened: a rate source for three micro-batches
    # (--seconds only bounds a stuck run: a loaded CI box may take a while for the first batch).
    result = run_job("--bootstrap", kafka_bootstrap, "--topic", topic, "--client-id", "job-test",
                     "--mode", "stream", "--rows-per-second", "2000", "--value-bytes", "50",
                     "--max-batches", "3", "--seconds", "240", "--master", "local[2]")
    assert result.returncode == 0, result.stderr[-5000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    *progress, summary = lines
    assert summary["sink"] == "kqp-kafka" and summary["client_id"] == "job-test"
    assert summary["batches"] == 3 and len(progress) == 3, result.stdout
    written = consume_keys(kafka_bootstrap, topic, expected=1, timeout=20)
    assert written and max(written.values()) == 1
