"""Smoke run of the fleet-exchange cost benchmark: it runs end to end on both layouts, no thresholds.

Its figures are read by a person (proxy/README.md, "Fleet exchange", quotes them); this only proves the script
still starts one Redis (with a replica) and a 3+3 Redis Cluster, measures every case and prints the ratios, and
stops every server it started.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.redis_cluster import needs_redis_cluster

from kqp.proxy.bench import fleet_exchange


@needs_redis_cluster
@pytest.mark.timeout(120)
def test_the_exchange_cost_bench_measures_both_layouts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fleet_exchange.main(["--entities", "300", "--exchanges", "4", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| (redis|cluster) \| 300 \| ([\d.]+) \|",
                                                                 printed, re.MULTILINE)}
    assert set(rows) == {"redis", "cluster"} and all(ms > 0 for ms in rows.values()), printed
    assert "300 entities: exchange median" in printed
    logs = list(tmp_path.glob("*.log"))
    assert len(logs) == 8, logs   # one Redis and its replica, six cluster nodes: all started, all logged
