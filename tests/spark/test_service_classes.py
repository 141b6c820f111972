"""deploy/spark/service_classes.py: a streaming query and two batch jobs through kqp, one pool whose
`latency` class (the stream) is served before the `batch` class.

kqp runs with the `quotas:` section of deploy/spark/kqp-service-classes.yaml as shipped (1 MiB/s;
the stream's class at most half of it, with 4 s of burst credit) in front of the mock cluster; the
script runs as a user would start it. The stream (500 rows/s of ~110 B, a micro-batch a second, or
as often as a busy machine lets Spark) offers about 55 kB/s, well under its class's share: its
micro-batches are never throttled, while the two batch jobs, 40,000 rows each written as fast as kqp
lets them, share the rest and are. Every batch row arrives exactly once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from spark_checks import consume_keys

from kqp.spark.session import spark_missing_reason

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "spark"
ROWS = 40_000   # ~4.2 MB a job: the mock cluster keeps about 5 MB a partition


@pytest.mark.slow
def test_a_stream_and_two_batch_jobs_share_one_pool_the_stream_first(kafka_bootstrap: str, tmp_path: Path) -> None:
    reason = spark_missing_reason()
    if reason:
        pytest.skip(f"Spark cannot run here: {reason}")
    from helpers.kqp_process import start_kqp

    quotas = yaml.safe_load((DEPLOY / "kqp-service-classes.yaml").read_text())["quotas"]
    kqp = start_kqp(tmp_path, kafka_bootstrap, quotas)
    try:
        topic = f"classes-{tmp_path.name[-8:]}"
        result = subprocess.run([sys.executable, str(DEPLOY / "service_classes.py"), "--bootstrap", kqp.bootstrap,
                                 "--topic", topic, "--rows", str(ROWS), "--master", "local[3]"],
                                capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stderr[-5000:]
        lines: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        summary = lines[-1]
        print(f"\nCLASSES spark: {json.dumps(summary)}")
        assert summary["micro_batches"] >= 2 and summary["stream_rows"] > 0, summary
        assert summary["stream_throttle_seconds"] == 0, summary     # the class above: never held back
        assert summary["batch_throttle_seconds"] > 0, summary       # the batch jobs: held to what it leaves
        assert summary["batch_rows"] == 2 * ROWS
        for job in ("ingest-batch-a", "ingest-batch-b"):
            written = consume_keys(kqp.bootstrap, f"{topic}-{job}", expected=ROWS, timeout=60)
            assert len(written) == ROWS and max(written.values()) == 1, job
    finally:
        code = kqp.stop()
        assert code == 0, f"kqp exited with {code}:\n{kqp.logs()[-3000:]}"
