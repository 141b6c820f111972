"""Fixtures for the Spark tests: one local SparkSession and one mock Kafka cluster per session.

A SparkSession costs seconds to start (a JVM and Python workers), so every Spark test in this
process shares one, as CI on two cores needs. It starts with Spark's own Kafka connector on its
class path (`spark.jars`: tests/jvm/spark-kafka/pom.xml resolved by Maven, or the folder
KQP_SPARK_KAFKA_JARS names), so the same session serves kqp's jar-free `kqp-kafka` sink and the
built-in `kafka` sink and source. The jar-free tests write to librdkafka's mock cluster in a
subprocess (tests/upstreams/mock_cluster.py), or the real cluster named by KQP_TEST_BOOTSTRAP; the
built-in ones to Apache Kafka (the suite's `kafka` fixture). Spark tests skip, with the reason,
where pyspark, pyarrow or Java is missing; the pure tests of the sink's parts run everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kqp.spark.session import local_session, spark_missing_reason

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # tests/helpers and tests/upstreams are shared with the e2e suite
    sys.path.insert(0, str(TESTS))

JARS_OVERRIDE = "KQP_SPARK_KAFKA_JARS"   # a folder of connector jars a user brings instead of Maven's


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[str]:
    """The jar files of Spark's built-in Kafka connector at pyspark's version; [] where Maven is
    missing (outside CI, where `.ci/run` installs it and a missing one fails the run)."""
    from upstreams import jvm

    folder = os.environ.get(JARS_OVERRIDE)
    if not folder:
        try:
            folder = str(jvm.jars("spark-kafka"))
        except jvm.JvmMissing:
            if os.environ.get("CI"):
                raise
            return []
    found = sorted(str(p) for p in Path(folder).glob("*.jar"))
    if not found:
        raise pytest.UsageError(f"{JARS_OVERRIDE}={folder} holds no .jar files")
    return found


@pytest.fixture(scope="session")
def spark(spark_kafka_jars: list[str]) -> Iterator[Any]:
    reason = spark_missing_reason()
    if reason:
        pytest.skip(f"Spark cannot run here: {reason}")
    conf = {"spark.jars": ",".join(spark_kafka_jars)} if spark_kafka_jars else {}
    session = local_session("kqp-spark-tests", "local[2]", conf)
    from kqp.spark import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A Kafka cluster for the sink to write to: KQP_TEST_BOOTSTRAP, or a 1-broker mock cluster."""
    real = os.environ.get("KQP_TEST_BOOTSTRAP")
    if real:
        yield real
        return
    pytest.importorskip("confluent_kafka")
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "upstreams" / "mock_cluster.py"), "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # first line: the bootstrap list
        if not line:
            raise RuntimeError(f"mock cluster did not start (exit code {proc.poll()})")
        yield line
    finally:
        if proc.stdin:
            proc.stdin.close()  # EOF on stdin: the mock cluster exits
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def topic() -> str:
    return f"spark-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def throttling_kqp(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """kqp in front of the cluster with producer quotas low enough to throttle the Spark writes."""
    from helpers.kqp_process import start_kqp
    from helpers.net import free_port
    from spark_checks import THROTTLING_QUOTAS

    proc = start_kqp(tmp_path_factory.mktemp("kqp"), kafka_bootstrap, THROTTLING_QUOTAS,
                     metrics={"listen": f"127.0.0.1:{free_port()}"})
    yield proc
    code = proc.stop()
    assert code == 0, f"kqp exited with {code}:\n{proc.logs()[-3000:]}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # With `pytest -n 2 --dist loadgroup` every test that needs the SparkSession runs on one
    # worker, so CI starts one JVM rather than one per worker (plain `--dist load` ignores this).
    # First: pytest-xdist's worker reads the marks in this same hook, and without tryfirst it ran
    # before this one, so no Spark test was grouped.
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents and "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
