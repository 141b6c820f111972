"""Run Debian's kcat (librdkafka 2.0 inside) against kqp or an upstream, with bounded time.

kcat is a separate C client with its own librdkafka, older than confluent-kafka's, so it
exercises a different ApiVersions/Metadata path; Tansu answers it in a way it cannot parse, which
is exactly why it is in the matrix. Locally a missing kcat skips these tests; under CI (CI=true)
a missing kcat is an install bug and fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence

import pytest


def kcat_path() -> str:
    """Path to kcat; skip the test if it is absent (fail instead when CI=true)."""
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kcat is not installed; .ci/run must apt-get install kcat")
        pytest.skip("kcat is not installed (apt-get install -y kcat)")
    return path


def run_kcat(args: Sequence[str], *, input_text: str | None = None,
             timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run `kcat ARGS`; a hang past `timeout` raises subprocess.TimeoutExpired (the process is killed)."""
    return subprocess.run([kcat_path(), *args], input=input_text, capture_output=True, text=True,
                          timeout=timeout, check=False)


def kcat_metadata(bootstrap: str, *, timeout: float = 20.0) -> dict:
    """`kcat -L -J`: the cluster metadata kcat sees, as parsed JSON; raises AssertionError on failure."""
    result = run_kcat(["-b", bootstrap, "-L", "-J", "-m", "10"], timeout=timeout)
    assert result.returncode == 0, f"kcat -L failed ({result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout)
