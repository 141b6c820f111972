"""A SparkSession for kqp's demo, the deploy pipeline and the tests: local and quiet by default.

Local mode (`local[N]`) runs the driver and executors in one JVM beside this Python process; the
Python workers that run the sink's tasks must use this interpreter (where kqp is installed), so
PYSPARK_PYTHON is pinned to it. Everything binds to 127.0.0.1 (no UI, no hostname lookups), which
keeps a demo or a test on a laptop or a CI box off the network. Under spark-submit on a cluster
none of that applies and the session is left as spark-submit configured it. Spark needs a Java runtime; when
pyspark or Java is missing, `spark_missing_reason` says which, so callers can skip or explain.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from typing import Any


def spark_missing_reason() -> str | None:
    """None when a local SparkSession can start here; otherwise what is missing, in one line."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'kafka-quota-proxy[spark]')"
    if importlib.util.find_spec("pyarrow") is None:
        return "pyarrow is not installed (Spark's Python data sources need it)"
    if importlib.util.find_spec("confluent_kafka") is None:
        return "confluent-kafka is not installed"
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) and not shutil.which("java"):
        return "no Java runtime found (Spark 4 needs Java 17 or 21: set JAVA_HOME or put java on PATH)"
    return None


def local_session(app_name: str, master: str | None = "local[2]", conf: dict[str, str] | None = None) -> Any:
    """A SparkSession in local mode, quiet and loopback-only; the caller stops it.

    `master=None` leaves the master to spark-submit (a master set in code would override it),
    or to pyspark's default (local[*]) when the script runs under plain python.
    """
    from pyspark.sql import SparkSession

    # spark-submit starts the JVM first and hands its gateway to Python through these variables.
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    local = master.startswith("local") if master else not under_submit
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = builder.appName(app_name).config("spark.sql.streaming.stopTimeout", "30s")
    if local:
        # Executors' Python workers run the sink's code: they must see the kqp installation.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            # Small jobs: a handful of shuffle partitions.
            .config("spark.sql.shuffle.partitions", "4")
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
