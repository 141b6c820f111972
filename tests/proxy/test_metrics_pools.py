"""Pool series (proxy/observability/pool_metrics.py) from a real QuotaManager: exact values, and label
sets that go with the members (silent for a span: out of the division; idle: expired)."""

from __future__ import annotations

import math

import pytest

from kqp.config import quota_settings_from
from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.proxy.observability.pool_metrics import budget_changes
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal

B = 300_000
POOL = {"pool": "ingest", "quota": "producer_byte_rate"}
A = {**POOL, "user": "", "client_id": "", "client_id_prefix": "job-a-"}
X = {**POOL, "user": "ANONYMOUS", "client_id": "job-x-1", "client_id_prefix": ""}


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def observed() -> tuple[PrometheusObserver, QuotaManager, Clock]:
    clock = Clock()
    # Kafka's sampled rate: the member held back below is throttled on its first charges.
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "algorithm": "sampled", "entities": [
        {"client_id_prefix": "job-a-", "weight": 3}],
        "pools": [{"name": "ingest", "producer_byte_rate": B, "members": [{"client_id_prefix": "job-"}]}]}), 0.0)
    obs = PrometheusObserver(entity_expiry_seconds=30, clock=clock, process_metrics=False)
    obs.bind(clock, m)
    return obs, m, clock


def value(obs: PrometheusObserver, name: str, labels: dict[str, str]) -> float | None:
    return obs.registry.get_sample_value(name, labels)


def test_pool_and_member_series() -> None:
    obs, m, clock = observed()
    m.record_produce(Principal("ANONYMOUS", "job-a-1"), 100_000, 1, 1, 0.0)
    m.record_produce(Principal("ANONYMOUS", "job-x-1"), 20_000, 1, 1, 0.0)
    assert value(obs, "kqp_pool_budget", POOL) == B
    assert value(obs, "kqp_pool_budget_configured", POOL) == B
    assert value(obs, "kqp_pool_members", POOL) == 2
    # both just joined, wanting their shares: 3:1, nothing lent or borrowed
    assert value(obs, "kqp_pool_member_allocation", A) == 225_000
    assert value(obs, "kqp_pool_member_fair_share", X) == 75_000
    assert value(obs, "kqp_pool_member_borrowed", A) == 0
    assert value(obs, "kqp_pool_member_demand", A) == math.inf
    # usage over the span's complete windows: none yet; once window 0 is complete, 100000 / 2.2 s
    assert value(obs, "kqp_pool_member_usage", A) == 0
    clock.t = 0.2
    assert value(obs, "kqp_pool_member_usage", A) == 100_000 / 2.2
    assert value(obs, "kqp_pool_usage", POOL) == pytest.approx(120_000 / 2.2)
    assert value(obs, "kqp_pool_lent", POOL) == 0
    # job-x-1 goes quiet: after two windows its share is lent to job-a- (which is held back)
    for tick in range(2, 5):
        clock.t = tick * 0.2
        m.record_produce(Principal("ANONYMOUS", "job-a-1"), 200_000, 1, 1, clock.t)
    assert value(obs, "kqp_pool_member_allocation", A) == B
    assert value(obs, "kqp_pool_member_borrowed", A) == 75_000
    assert value(obs, "kqp_pool_member_allocation", X) == 75_000     # kept: it can come back at once
    assert value(obs, "kqp_pool_lent", POOL) == 75_000


def test_member_series_go_with_the_members() -> None:
    obs, m, clock = observed()
    m.record_produce(Principal("ANONYMOUS", "job-x-1"), 1000, 1, 1, 0.0)
    clock.t = 3.0                       # silent for more than a span: out of the division
    assert value(obs, "kqp_pool_member_allocation", X) is None
    assert value(obs, "kqp_pool_members", POOL) == 0
    clock.t = 40.0
    obs.expire()                        # and expired with the entities
    assert m.pools.member_count == 0
    assert value(obs, "kqp_pool_budget", POOL) == B   # the pool itself stays


def test_adaptive_pool_series() -> None:
    """An adaptive pool of 10 MB/s, target 100 ms: it starts at its floor (1%: 100 kB/s). Five answers
    at 20 ms carrying 40 kB in window 0 (D = 200 kB/s), then window 1's first charge closes window 0:
    slow start to min(2 x 100k, 2 x 200k) = 200 kB/s, one change of reason slow_start."""
    clock = Clock()
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "pools": [
        {"name": "ingest", "producer_byte_rate": 10_000_000, "members": [{"client_id_prefix": "job-"}],
         "adaptive": {"target_latency_ms": 100}}]}), 0.0)
    obs = PrometheusObserver(entity_expiry_seconds=30, clock=clock, process_metrics=False)
    obs.bind(clock, m)
    assert value(obs, "kqp_pool_budget", POOL) == 100_000
    assert value(obs, "kqp_pool_adaptive_target_seconds", POOL) == 0.1
    assert value(obs, "kqp_pool_adaptive_floor", POOL) == 100_000
    assert math.isnan(value(obs, "kqp_pool_adaptive_latency_seconds", POOL))   # nothing answered yet
    assert value(obs, "kqp_pool_adaptive_changes_total", {**POOL, "reason": "slow_start"}) == 0
    m.record_produce(Principal("ANONYMOUS", "job-a-1"), 1000, 1, 1, 0.05)
    [pool] = m.pools.adaptive.values()
    for _ in range(5):
        pool.observe(0.1, 1, 0.020, (8000, 1, 1, 1), 0)
    clock.t = 0.21
    m.record_produce(Principal("ANONYMOUS", "job-a-1"), 1000, 1, 1, clock.t)
    assert value(obs, "kqp_pool_budget", POOL) == 200_000
    assert value(obs, "kqp_pool_adaptive_latency_seconds", POOL) == pytest.approx(0.020, rel=0.1)
    assert value(obs, "kqp_pool_adaptive_delivered", POOL) == pytest.approx(200_000)
    assert value(obs, "kqp_pool_adaptive_changes_total", {**POOL, "reason": "slow_start"}) == 1


def test_budget_changes_for_kqp_explain_are_an_adaptive_pools_recent_changes() -> None:
    """An adaptive pool of ceiling 10 MB/s starts at its floor, 1% = 100 kB/s; one window of answers
    at 20 ms (under the 100 ms target) delivering 40 kB / 0.2 s = 200 kB/s: slow start doubles it."""
    clock = Clock()
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "pools": [
        {"name": "ingest", "producer_byte_rate": 10_000_000, "members": [{"client_id_prefix": "job-"}],
         "adaptive": {"target_latency_ms": 100}}]}), 0.0)
    provider = budget_changes(m, clock)
    job = Principal("ANONYMOUS", "job-a-1")
    m.record_produce(job, 1000, 1, 1, 0.05)
    [pool] = m.pools.adaptive.values()
    for _ in range(5):
        pool.observe(0.1, 1, 0.020, (8000, 1, 1, 1), 0)
    m.record_produce(job, 1000, 1, 1, 0.25)   # window 0 closes
    clock.t = 1.2
    [change] = provider("ingest")
    assert change["at"] == pytest.approx(0.2) and change["ago_seconds"] == pytest.approx(1.0)
    assert (change["quota"], change["old"], change["budget"], change["reason"]) == (
        "producer_byte_rate", 100_000, 200_000, "slow_start")
    assert change["target_seconds"] == 0.1 and change["text"].startswith("budget 100,000 -> 200,000/s")
    assert provider("other") == []


def test_class_series_and_each_members_class() -> None:
    # The classes over B = 400 kB/s: a batch job (batch) offering 80 kB a window (400 kB/s, more
    # than it gets: held back), the stream (latency) 20 kB a window, for 12 windows; then a second stream.
    clock = Clock()
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "pools": [
        {"name": "ingest", "producer_byte_rate": 400_000, "members": [{"client_id_prefix": "job-"}], "classes": [
            {"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
            {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]}]}), 0.0)
    obs = PrometheusObserver(entity_expiry_seconds=30, clock=clock, process_metrics=False)
    obs.bind(clock, m)
    for window in range(12):
        now = window * 0.2 + 0.01
        m.record_produce(Principal("ANONYMOUS", "job-batch-1"), 80_000, 1, 1, now)
        m.record_produce(Principal("ANONYMOUS", "job-stream-1"), 20_000, 1, 1, now)
    clock.t = 12 * 0.2
    latency, batch = {**POOL, "class": "latency"}, {**POOL, "class": "batch"}
    # the stream's 100 kB/s first; the batch job (held back by the sampled rate) the other 300k
    assert value(obs, "kqp_pool_class_allocation", latency) == pytest.approx(100_000)
    assert value(obs, "kqp_pool_class_allocation", batch) == pytest.approx(300_000)
    assert value(obs, "kqp_pool_class_demand", latency) == pytest.approx(100_000)
    assert value(obs, "kqp_pool_class_demand", batch) == math.inf
    # what each moved over the span's 11 complete windows: 220 kB / 2.2 s
    assert value(obs, "kqp_pool_class_delivered", latency) == pytest.approx(100_000)
    assert value(obs, "kqp_pool_class_members", batch) == 1
    assert value(obs, "kqp_pool_class_preemptions_total", batch) == 1   # the stream's joining, at 0.01 s
    assert value(obs, "kqp_pool_class_preemptions_total", latency) == 0
    stream = {**POOL, "user": "ANONYMOUS", "client_id": "job-stream-1", "client_id_prefix": ""}
    assert value(obs, "kqp_pool_member_class", {**stream, "class": "latency"}) == 1
    # a second stream starting (10 kB at once, over 5% of its share's window): the batch class cut again
    m.record_produce(Principal("ANONYMOUS", "job-stream-2"), 10_000, 1, 1, clock.t + 0.01)
    assert value(obs, "kqp_pool_class_preemptions_total", batch) == 2
    assert value(obs, "kqp_pool_class_allocation", batch) == 0   # both streams want the budget until measured


def test_a_pool_without_classes_has_no_class_series() -> None:
    obs, m, _ = observed()
    m.record_produce(Principal("ANONYMOUS", "job-a-1"), 1000, 1, 1, 0.0)
    assert value(obs, "kqp_pool_class_allocation", {**POOL, "class": ""}) is None
    assert value(obs, "kqp_pool_member_class", {**A, "class": ""}) is None
