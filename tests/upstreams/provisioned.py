"""Upstreams the project provisions itself (Apache Kafka from Maven): started, or the test skipped.

On CI (`CI=true`) a missing Java or an unresolvable pom fails the test: `.ci/run` installs both, so
their absence there is a broken run, not a machine without Java. Elsewhere the test is skipped with
what to install.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .jvm import JvmMissing
from .kafka import KafkaCluster


@contextlib.contextmanager
def kafka_or_skip(directory: Path, nodes: int = 1, **options: Any) -> Iterator[KafkaCluster]:
    try:
        cluster = KafkaCluster(directory, nodes, **options)
    except JvmMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"Apache Kafka cannot run here: {exc}")
    with cluster:
        yield cluster
