"""kqp.spark.demo.run_spark_demo, which `kqp demo --spark` calls."""

from __future__ import annotations

from typing import Any

import pytest
from spark_checks import DEMO_CLIENT, assert_exactly_once, consume_keys

from kqp.spark import demo


def test_run_spark_demo_reports_what_the_tasks_wrote(spark: Any, kafka_bootstrap: str, topic: str) -> None:
    result = demo.run_spark_demo(kafka_bootstrap, rows=5_000, topic=topic, client_id="demo-test",
                                 value_bytes=10, partitions=2, spark=spark)
    assert result["rows"] == 5_000 and result["tasks"] == 2
    # Keys "0".."4999" are 1-4 bytes: 10 * 1 + 90 * 2 + 900 * 3 + 4000 * 4 = 18890, plus 10-byte values.
    assert result["bytes"] == 18_890 + 5_000 * 10
    assert result["seconds"] > 0 and result["rows_per_second"] == pytest.approx(5_000 / result["seconds"])
    assert result["throttle_events"] == 0  # straight to the cluster: nobody throttles
    assert (result["client_id"], result["topic"]) == ("demo-test", topic)
    assert_exactly_once(consume_keys(kafka_bootstrap, topic, 5_000), 5_000)


def test_run_spark_demo_through_kqp_sees_throttling(spark: Any, throttling_kqp: Any, topic: str) -> None:
    # DEMO_CLIENT has a 750 kB/s quota in the throttling kqp: 30k rows of 100-byte values
    # (~3.5 MB of frames) cannot go through unthrottled.
    result = demo.run_spark_demo(throttling_kqp.bootstrap, rows=30_000, topic=topic,
                                 client_id=DEMO_CLIENT, spark=spark)
    assert result["rows"] == 30_000
    assert result["throttle_events"] > 0 and result["throttle_seconds"] > 0


def test_run_spark_demo_explains_a_missing_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "spark_missing_reason", lambda: "no Java runtime found")
    with pytest.raises(demo.SparkUnavailable, match="no Java runtime found"):
        demo.run_spark_demo("127.0.0.1:1", rows=1)
