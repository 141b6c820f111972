"""Issue 21's capacity pool config, as the issue writes it, for every test that runs it as written.

One pool `ingest` of 300 kB/s for every client id starting `job-`, each principal a member as the
entity it resolves to: `job-a-` (weight 3), `job-b-` or `job-c-` (weight 1); 0.2 s quota windows.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

ISSUE_POOL_YAML = """
window_size_seconds: 0.2
entities:
  - client_id_prefix: job-a-
    weight: 3
  - client_id_prefix: job-b-
  - client_id_prefix: job-c-
pools:
  - name: ingest
    producer_byte_rate: 300000
    members:
      - client_id_prefix: job-
"""
BUDGET = 300_000


def issue_pool(**more: Any) -> dict[str, Any]:
    """The `quotas:` section, a fresh copy (tests change it), with `more` top-level keys."""
    return {**copy.deepcopy(yaml.safe_load(ISSUE_POOL_YAML)), **more}
