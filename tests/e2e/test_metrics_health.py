"""/healthz, /readyz and the reload counter of a real kqp process.

A kqp pointed at a port where nothing listens must answer /healthz 200 (a liveness probe must not
restart a proxy that waits for Kafka) and /readyz 503 with the reason, and still stop cleanly. A
config file that fails to load counts as a failed reload; a good one as a success, and the new
limit is what /metrics exports.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers.kqp_process import KqpProcess, kqp_command, kqp_env
from helpers.net import free_port
from helpers.observability import QUOTAS, THROTTLED, sample, scrape, start_with_metrics
from helpers.raw_client import RawConnection, Tally

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_ready_with_an_upstream(tansu, kqp) -> None:
    _, url = start_with_metrics(kqp, tansu)
    assert get(f"{url}/healthz") == (200, b"ok\n")
    status, body = get(f"{url}/readyz")
    assert status == 200 and body.startswith(b"ready (upstream Metadata ")
    assert get(f"{url}/nothing")[0] == 404
    _, metrics = get(f"{url}/metrics")
    assert b"kqp_ready 1.0" in metrics and b"kqp_upstream_up 1.0" in metrics


def test_alive_but_not_ready_without_an_upstream(tmp_path: Path) -> None:
    metrics_port = free_port()
    config = {"listen": f"127.0.0.1:{free_port()}", "broker_port_base": 0,
              "upstream": {"bootstrap_servers": f"127.0.0.1:{free_port()}", "connect_timeout_ms": 500},
              "metrics": {"listen": f"127.0.0.1:{metrics_port}"}, "shutdown_grace_ms": 1000}
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(kqp_command("run", "--config", str(path)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=kqp_env())
    process = KqpProcess(proc, path, config)
    try:
        process.wait_for_log("metrics endpoint", timeout=15)
        url = f"http://127.0.0.1:{metrics_port}"
        assert get(f"{url}/healthz") == (200, b"ok\n")
        process.wait_for_log("waiting for the upstream", timeout=10)
        status, body = get(f"{url}/readyz")
        assert status == 503
        assert body.startswith(b"starting: waiting for the upstream (127.0.0.1:"), body
        assert b"kqp_ready 0.0" in get(f"{url}/metrics")[1]
        assert process.stop(signal.SIGTERM) == 0, process.logs()
    finally:
        process.kill()


def test_reloads_are_counted_and_the_new_limit_is_exported(tansu, kqp) -> None:
    proxy, url = start_with_metrics(kqp, tansu)
    # The limit gauge is per entity seen: make spark-etl known to kqp with one request.
    with RawConnection(proxy.bootstrap, THROTTLED, Tally()) as conn:
        conn.call(ApiKey.Metadata, 7, "Metadata", topics=[], allow_auto_topic_creation=False)
    who = {"quota": "producer_byte_rate", "user": "ANONYMOUS", "client_id": THROTTLED}
    assert sample(scrape(url), "kqp_quota_limit", **who) == 20_000

    good = yaml.safe_load(proxy.config_path.read_text())
    mark = len(proxy.log_lines())
    proxy.config_path.write_text("quotas: [this is not a mapping\n")
    proxy.wait_for_log("config reload failed", timeout=10, after=mark)
    samples = scrape(url)
    assert sample(samples, "kqp_config_reloads_total", result="failure") == 1
    assert sample(samples, "kqp_config_reloads_total", result="success") == 0

    good["quotas"] = {**QUOTAS, "entities": [{"client_id": THROTTLED, "producer_byte_rate": 30_000}]}
    mark = len(proxy.log_lines())
    proxy.config_path.write_text(yaml.safe_dump(good))
    proxy.wait_for_log("quota change", timeout=10, after=mark)
    samples = scrape(url)
    assert sample(samples, "kqp_config_reloads_total", result="success") == 1
    assert sample(samples, "kqp_quota_limit", **who) == 30_000
