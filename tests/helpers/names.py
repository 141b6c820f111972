"""Unique topic and group names, so tests sharing one session-wide upstream never see each other's data.

Names carry the xdist worker id and a random suffix: two workers, or a rerun against a long-lived
real cluster (KQP_TEST_BOOTSTRAP), cannot collide.
"""

from __future__ import annotations

import os
import re
import uuid


def _clean(prefix: str) -> str:
    # Kafka topic names allow [a-zA-Z0-9._-]; pytest node names carry brackets and slashes.
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", prefix).strip("-")[:80] or "t"


def unique_topic(prefix: str = "kqp-test") -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"{_clean(prefix)}-{worker}-{uuid.uuid4().hex[:10]}"


def unique_group(prefix: str = "kqp-group") -> str:
    return unique_topic(prefix)
