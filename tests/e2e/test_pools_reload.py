"""Live reload of a capacity pool and of an adaptive pool through `kqp run`, under load (issues 21, 22).

One confluent-kafka producer, `job-b-1`, flat out through kqp to the one-broker mock cluster; kqp's
metrics scraped. What must hold, as for quotas (test_reload.py): the config file rewritten the way a
ConfigMap update does, the change applies within a second on the connection the producer already
has, and what was measured is kept:

- a new pool budget: the pool divides it at once (job-b-1, alone, is allocated all of it), and the
  member's rate follows it (kqp's `kqp_pool_usage`, over a span that starts after the change);
- a new target for an adaptive pool: the law's state is kept, so the effective budget goes on from
  where it was; a pool built afresh would start again at its floor (1% of the ceiling).

No client errs or times out.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.observability import metrics_url, sample, scrape
from helpers.pool_config import BUDGET, issue_pool
from helpers.quota_clients import ProduceRun, confluent_flood
from helpers.topics import ensure_topic

from e2e.test_reload import rewrite_config

pytestmark = pytest.mark.e2e

POOL = {"pool": "ingest", "quota": "producer_byte_rate"}
JOB_B = {**POOL, "user": "", "client_id": "", "client_id_prefix": "job-b-"}
SPAN = 0.2 * 11
CEILING = 10_000_000
FLOOR = CEILING / 100


class Flood(threading.Thread):
    """job-b-1 producing flat out for `seconds`, its run kept for the end."""

    def __init__(self, bootstrap: str, topic: str, seconds: float) -> None:
        super().__init__(name="flood-job-b-1", daemon=True)
        self.args = (bootstrap, topic, "job-b-1", seconds)
        self.result: ProduceRun | None = None

    def run(self) -> None:
        self.result = confluent_flood(*self.args)

    def finish(self) -> None:
        self.join(60)
        assert self.result is not None, "the producer did not finish"
        assert not self.result.errors, f"client errors: {self.result.errors[:5]}"


def flooded(kqp: Any, upstream: Any, quotas: dict[str, Any], seconds: float) -> tuple[Any, str, Flood]:
    proxy = kqp(upstream, quotas, metrics={"listen": "127.0.0.1:0"})
    topic = unique_topic("pool-reload")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=upstream.kind)
    flood = Flood(proxy.bootstrap, topic, seconds)
    flood.start()
    return proxy, metrics_url(proxy), flood


def reload(proxy: Any, quotas: dict[str, Any], line: str) -> float:
    """Rewrite the config; returns how long kqp took to apply it (its reload log line)."""
    mark = len(proxy.log_lines())
    written = time.monotonic()
    rewrite_config(proxy.config_path, proxy.config, quotas=quotas)
    proxy.wait_for_log(line, 3.0, after=mark)
    return time.monotonic() - written


def test_a_new_pool_budget_applies_at_once_and_the_member_follows(kqp: Any, mock_cluster: Any) -> None:
    half = BUDGET // 2
    proxy, metrics, flood = flooded(kqp, mock_cluster, issue_pool(), 14.0)
    time.sleep(2 * SPAN)
    before = scrape(metrics)
    assert sample(before, "kqp_pool_member_allocation", **JOB_B) == BUDGET   # alone: the whole budget
    changed = issue_pool()
    changed["pools"][0]["producer_byte_rate"] = half
    took = reload(proxy, changed, f"pool ingest: producer_byte_rate {BUDGET} -> {half}")
    assert took < 1.0, f"the new budget took {took:.2f}s to apply"
    now = scrape(metrics)
    assert sample(now, "kqp_pool_budget", **POOL) == half
    assert sample(now, "kqp_pool_member_allocation", **JOB_B) == half
    time.sleep(SPAN + 1.0)   # kqp_pool_usage is the rate over the last span: one wholly after the change
    usage = sample(scrape(metrics), "kqp_pool_usage", **POOL)
    assert usage is not None and 0.7 * half <= usage <= 1.1 * half, f"{usage} B/s after the budget became {half}"
    flood.finish()


def test_an_adaptive_pools_reload_keeps_the_laws_state(kqp: Any, mock_cluster: Any) -> None:
    quotas = issue_pool()
    quotas["pools"][0].update(producer_byte_rate=CEILING, adaptive={"target_latency_ms": 100})
    proxy, metrics, flood = flooded(kqp, mock_cluster, quotas, 10.0)
    time.sleep(2 * SPAN)
    # The loopback broker answers well under 100 ms: the law has grown the budget off its floor.
    grown = sample(scrape(metrics), "kqp_pool_budget", **POOL)
    assert grown is not None and grown >= 4 * FLOOR, f"budget {grown}: the law did not grow it"
    quotas["pools"][0]["adaptive"] = {"target_latency_ms": 200}
    took = reload(proxy, quotas, "pool ingest: adaptive changed")
    assert took < 1.0, f"the new target took {took:.2f}s to apply"
    now = scrape(metrics)
    assert sample(now, "kqp_pool_adaptive_target_seconds", **POOL) == pytest.approx(0.2)
    # A healthy pool's budget only grows or decays 5% a window (~0.4 s since `grown`): kept, not reset.
    kept = sample(now, "kqp_pool_budget", **POOL)
    assert kept is not None and kept >= 0.5 * grown and kept > 2 * FLOOR, f"budget {grown} -> {kept} on reload"
    flood.finish()


def test_classes_added_by_a_reload_divide_at_once_and_keep_the_measurements(kqp: Any, mock_cluster: Any) -> None:
    # job-b-1 flat out, job-a-1 offering 50 kB/s; the issue's pool (job-a- weight 3). The reload puts
    # job-a- in a class above job-b-: the class series appear at once, and job-b-'s usage, measured
    # before, goes on (a pool measured afresh would read 0 for a span).
    proxy, metrics, flood = flooded(kqp, mock_cluster, issue_pool(), 10.0)
    paced = threading.Thread(target=confluent_flood, args=(proxy.bootstrap, flood.args[1], "job-a-1", 9.0),
                             kwargs={"offer_bytes_s": 50_000}, daemon=True)
    paced.start()
    time.sleep(2 * SPAN)
    used = sample(scrape(metrics), "kqp_pool_member_usage", **JOB_B)
    assert used is not None and used > 0.5 * BUDGET
    changed = issue_pool()
    changed["pools"][0]["classes"] = [{"name": "latency", "members": [{"client_id_prefix": "job-a-"}]},
                                      {"name": "batch", "members": [{"client_id_prefix": "job-b-"}]}]
    took = reload(proxy, changed, "pool ingest: classes changed")
    assert took < 1.0, f"the classes took {took:.2f}s to apply"
    now = scrape(metrics)
    assert sample(now, "kqp_pool_member_usage", **JOB_B) >= 0.8 * used   # the same measurement, carried on
    latency = sample(now, "kqp_pool_class_allocation", **POOL, **{"class": "latency"})
    batch = sample(now, "kqp_pool_class_allocation", **POOL, **{"class": "batch"})
    # job-a- offers ~50 kB/s (+ record overhead): served first; job-b- the rest of 300k
    assert latency is not None and batch is not None and latency + batch == pytest.approx(BUDGET)
    assert 40_000 <= latency <= 90_000, (latency, batch)
    assert sample(now, "kqp_pool_member_class", **JOB_B, **{"class": "batch"}) == 1
    paced.join(30)
    flood.finish()
