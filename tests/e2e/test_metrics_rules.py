"""The shipped Prometheus rules, Prometheus config and Grafana dashboard are valid (issue 5).

`promtool check rules` / `check config` on the files as shipped, and `promtool test rules` on the
unit tests beside them (the sustained-throttling alert fires after 10 minutes of throttling, not
after a burst). The dashboard's structure is checked here; that its queries return data is checked
against a live Prometheus in test_metrics_prometheus.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "kqp-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool: apt-get install -y prometheus")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=PROM_DIR, check=False)


@needs_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "kqp-alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 6 rules found" in result.stdout


@needs_promtool
def test_promtool_check_config() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", "kqp-alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_rule_unit_tests_can_fail(tmp_path: Path) -> None:
    # The unit tests mean something: expecting the alert for the entity that was only throttled
    # briefly fails.
    shutil.copy(PROM_DIR / "kqp-alerts.yml", tmp_path)
    text = (PROM_DIR / "kqp-alerts.test.yml").read_text().replace("client_id: spark-etl", "client_id: burst")
    (tmp_path / "broken.test.yml").write_text(text)
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", "broken.test.yml"], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, check=False)
    assert result.returncode != 0 and "KqpEntityThrottled" in result.stdout + result.stderr


def test_alert_rules_cover_the_issue() -> None:
    rules = yaml.safe_load((PROM_DIR / "kqp-alerts.yml").read_text())["groups"][0]["rules"]
    by_name = {r["alert"]: r for r in rules}
    assert set(by_name) == {"KqpEntityThrottled", "KqpUpstreamDown", "KqpUpstreamErrors", "KqpConfigReloadFailed",
                            "KqpFleetQuotasNotShared", "KqpPoolSaturated"}
    assert "kqp_pool_usage" in by_name["KqpPoolSaturated"]["expr"] and by_name["KqpPoolSaturated"]["for"] == "15m"
    assert by_name["KqpFleetQuotasNotShared"]["expr"] == "kqp_fleet_sync_up == 0"
    assert "kqp_throttle_seconds_total" in by_name["KqpEntityThrottled"]["expr"]
    assert by_name["KqpEntityThrottled"]["for"] == "10m"
    assert 'result="failure"' in by_name["KqpConfigReloadFailed"]["expr"]


def test_dashboard_structure() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert dashboard["uid"] == "kqp"
    assert len({p["id"] for p in panels}) == len(panels)
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("quota", "throttle", "delay queue", "upstream latency", "pool"):
        assert topic in titles, topic
    for p in panels:
        grid = p["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "prometheus"}, p["title"]
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        assert all(t["datasource"]["uid"] == "prometheus" for t in p["targets"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert set(variables) == {"user", "client_id"}
    assert all(v["allValue"] == ".*" for v in variables.values())
