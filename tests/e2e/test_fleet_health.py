"""What an operator sees of fleet quotas on a real `kqp run`: /readyz, /metrics, the log, the password.

kqp in cluster scope in front of Tansu, with a real redis-server (helpers.redis_server):
- sharing: /readyz says with how many instances and through which Redis (never the password), and
  `kqp_fleet_sync_up` is 1;
- Redis killed: within a second /readyz still answers 200 (kqp still serves) and says the quotas are
  not shared, `kqp_fleet_sync_up` is 0 and the error counter grows, and one warning is logged however
  long the outage lasts; Redis back on its port: shared again, and the log says so;
- a password from `password_env` reaches Redis; a variable that is not set stops kqp at start with
  one line naming the key.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers.kqp_process import run_kqp_cli
from helpers.observability import sample, scrape, start_with_metrics
from helpers.redis_server import RedisServer, needs_redis, redis_server

pytestmark = [pytest.mark.e2e, needs_redis]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def cluster(url: str, **more: Any) -> dict[str, Any]:
    return {"window_size_seconds": 0.2, "window_count": 11, "scope": "cluster",
            "entities": [{"client_id": "<default>", "producer_byte_rate": 1_000_000}],
            "cluster": {"redis_url": url, "sync_interval_ms": 100, "timeout_ms": 200, "expected_instances": 2,
                        **more}}


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def test_readyz_metrics_and_log_follow_redis(tansu, kqp, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis.log", password="pw").start()
    try:
        proxy, url = start_with_metrics(kqp, tansu, quotas=cluster(server.url))
        proxy.wait_for_log("fleet quotas: shared through", timeout=10)
        status, body = get(f"{url}/readyz")
        assert status == 200 and "quotas shared by 1 instance(s) through redis://:***@127.0.0.1:" in body, body
        assert "pw@" not in body
        assert sample(scrape(url), "kqp_fleet_sync_up", backend="redis") == 1.0

        server.kill()
        killed = time.monotonic()
        status, body = wait_for(lambda: (r := get(f"{url}/readyz"))[1].count("not shared") and r, 1.0,
                                "/readyz to say the quotas are not shared")
        assert status == 200 and "holding each quota at 1/1" in body, body
        samples = scrape(url)
        assert sample(samples, "kqp_fleet_sync_up", backend="redis") == 0.0
        assert sample(samples, "kqp_fleet_quota_share", backend="redis") == 1.0   # 1 instance last seen
        time.sleep(0.5)   # five more failed exchanges: still one warning
        assert (sample(scrape(url), "kqp_fleet_sync_errors_total", backend="redis") or 0) >= 3
        warnings = [line for line in proxy.log_lines() if "the usage exchange with" in line]
        assert len(warnings) == 1, warnings
        assert time.monotonic() - killed < 3

        server.start()   # same port, same password, empty
        wait_for(lambda: "quotas shared by" in get(f"{url}/readyz")[1], 2.0, "/readyz to say shared again")
        assert sample(scrape(url), "kqp_fleet_sync_up", backend="redis") == 1.0
        proxy.wait_for_log("answers again", timeout=2)
    finally:
        server.stop()


def test_password_from_the_environment(tansu, kqp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with redis_server(tmp_path / "redis.log", password="from-env") as server:
        monkeypatch.setenv("KQP_TEST_REDIS_PASSWORD", "from-env")
        bare = f"redis://127.0.0.1:{server.port}/0"
        proxy, url = start_with_metrics(kqp, tansu, quotas=cluster(bare, password_env="KQP_TEST_REDIS_PASSWORD"))
        proxy.wait_for_log("fleet quotas: shared through", timeout=10)
        assert sample(scrape(url), "kqp_fleet_sync_up", backend="redis") == 1.0


def test_an_unset_password_variable_stops_kqp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KQP_TEST_UNSET_PASSWORD", raising=False)
    path = tmp_path / "kqp.yaml"
    path.write_text("upstream: {bootstrap_servers: '127.0.0.1:1'}\nquotas:\n  scope: cluster\n  cluster:\n"
                    "    redis_url: redis://127.0.0.1:1/0\n    password_env: KQP_TEST_UNSET_PASSWORD\n")
    done = run_kqp_cli("run", "--config", str(path))
    assert done.returncode == 2
    assert done.stderr.strip() == ("config error: quotas.cluster.password_env: the environment variable "
                                   "KQP_TEST_UNSET_PASSWORD is not set")
