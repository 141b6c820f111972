"""One quota for a fleet: three `kqp run` instances, one producer each, one quota between them.

helpers.fleet_path: three kqp processes in front of one upstream tap and a one-broker mock cluster,
a real redis-server in cluster scope. Each producer (confluent-kafka, offering several MB/s, retries
off, 5 s request timeout) writes through its own kqp, as sidecars do. Judged on the wire, after the
first burst (two spans from the first request): the upstream receives the quota Q within 5 % in
cluster scope, where instance scope (Kafka's per-broker semantics) gives each instance its own Q,
about 3Q in all. No delivery error, no request timed out, nothing lost.

Two entities: a client id shared by the three producers (`/clients/<id>`), and a user quota
(`/users/ANONYMOUS`, every connection's user until SASL principals arrive), which the three
producers share under three different client ids.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.fleet_path import SPAN, Fleet, fleet_quotas, fleet_rate, open_fleet, run_all
from helpers.names import unique_topic
from helpers.quota_clients import ProduceRun, confluent_flood, read_partition
from helpers.quota_path import quota_upstream
from helpers.redis_server import needs_redis, redis_server
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

pytestmark = [pytest.mark.e2e, needs_redis]

QUOTA = 150_000          # bytes/s for the whole fleet in cluster scope
INSTANCES = 3
OFFER_SECONDS = 11.0
TOLERANCE = 0.05        # the fidelity matrix's goal (tests/e2e/test_fidelity_matrix.py)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("fleet-producers")) as bootstrap:
        yield bootstrap


@contextlib.contextmanager
def fleet_of(kqp: Any, upstream: Upstream, tmp_path: Path, scope: str, entity: dict[str, Any]) -> Iterator[Fleet]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server(tmp_path / "redis.log")).url if scope == "cluster" else None
        yield open_fleet(stack, kqp, upstream, INSTANCES, fleet_quotas(entity, redis_url=url, instances=INSTANCES))


def assert_clean(runs: list[ProduceRun], upstream: Upstream, topics: list[str]) -> None:
    """No delivery error or timeout, and each producer's topic holds exactly what it was acknowledged."""
    for run, topic in zip(runs, topics, strict=True):
        assert not run.errors, f"{run.client_id}: delivery errors: {run.errors[:5]}"
        assert run.request_timeouts in (None, 0), f"{run.client_id}: {run.request_timeouts} request timeouts"
        assert len(run.acked) == run.sent, f"{run.client_id}: {run.sent - len(run.acked)} unacknowledged"
        stored = Counter(read_partition(upstream, topic))
        duplicated = sorted(v for v, n in stored.items() if n > 1)
        missing = sorted(set(run.acked) - set(stored))
        assert not duplicated and not missing, f"{topic}: duplicated {duplicated[:5]}, missing {missing[:5]}"


def topics_for(upstream: Upstream, prefix: str) -> list[str]:
    """A topic per producer: the producers of one client id number their messages alike."""
    topics = [unique_topic(f"{prefix}-{i}") for i in range(INSTANCES)]
    for topic in topics:
        ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    return topics


def judge(fleet: Fleet, runs: list[ProduceRun], scope: str, what: str) -> float:
    events = fleet.produce_events(sorted({run.client_id for run in runs}))
    start, end = events[0][0] + 2 * SPAN, min(run.offered_until for run in runs)
    assert end - start >= 2 * SPAN, f"offer too short to judge: {end - start:.1f}s"
    rate = fleet_rate(events, start, end)
    expected = QUOTA if scope == "cluster" else INSTANCES * QUOTA
    print(f"\nFLEET {what} scope={scope}: upstream {rate / 1000:.1f} KB/s = {rate / QUOTA:.2f} Q "
          f"over {end - start:.1f}s (expected {expected / QUOTA:.0f} Q)")
    assert abs(rate - expected) <= TOLERANCE * expected, \
        f"{scope} scope: the upstream received {rate / 1000:.1f} KB/s, {rate / QUOTA:.2f} x the quota " \
        f"{QUOTA / 1000:.0f} KB/s, expected {expected / QUOTA:.0f} x within {TOLERANCE:.0%}"
    return rate


@pytest.mark.parametrize("scope", ["cluster", "instance"])
def test_one_client_id_through_three_instances(scope: str, kqp: Any, upstream: Upstream, tmp_path: Path) -> None:
    client_id = unique_topic(f"fleet-client-{scope}")
    topics = topics_for(upstream, "fleet-client")
    with fleet_of(kqp, upstream, tmp_path, scope, {"client_id": client_id, "producer_byte_rate": QUOTA}) as fleet:
        runs = run_all([lambda k=k, t=t: confluent_flood(k.bootstrap, t, client_id, OFFER_SECONDS)
                        for k, t in zip(fleet.kqps, topics, strict=True)])
        judge(fleet, runs, scope, "client id")
    assert_clean(runs, upstream, topics)


@pytest.mark.parametrize("scope", ["cluster", "instance"])
def test_one_user_through_three_instances(scope: str, kqp: Any, upstream: Upstream, tmp_path: Path) -> None:
    # /users/ANONYMOUS: one quota for every client of the user, here three client ids on three instances.
    prefix = unique_topic(f"fleet-user-{scope}")
    topics = topics_for(upstream, "fleet-user")
    with fleet_of(kqp, upstream, tmp_path, scope, {"user": "ANONYMOUS", "producer_byte_rate": QUOTA}) as fleet:
        runs = run_all([lambda k=k, i=i, t=t: confluent_flood(k.bootstrap, t, f"{prefix}-{i}", OFFER_SECONDS)
                        for i, (k, t) in enumerate(zip(fleet.kqps, topics, strict=True))])
        judge(fleet, runs, scope, "user")
    assert_clean(runs, upstream, topics)
