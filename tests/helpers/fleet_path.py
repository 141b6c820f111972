"""A fleet on the wire: several `kqp run` processes in front of one upstream, behind one upstream tap.

    producer 0 -> kqp 0 \\
    producer 1 -> kqp 1  > upstream tap -> one-broker mock cluster (or KQP_TEST_BOOTSTRAP)
    producer 2 -> kqp 2 /

Every kqp is its own process with its own config file, as sidecars are; the tap relays the
upstream's brokers, so what the fleet as a whole let through is read in one place, per client id.
In cluster scope every kqp gets the same `quotas.cluster` section pointing at one redis-server.
Clients run in threads (librdkafka releases the GIL), all at once, with the offer and the judging
of helpers.quota_clients and helpers.quota_analysis.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

from .kqp_process import KqpProcess
from .observability import metrics_url, sample, scrape
from .quota_analysis import Event, cumulative_slope, fetch_response_events, request_events
from .quota_clients import ProduceRun, confluent_flood
from .quota_path import MOCK_MAX_API_VERSIONS, broker_addresses
from .wire_tap import WireTap

WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
SPAN = WINDOWS["window_size_seconds"] * WINDOWS["window_count"]
SYNC = {"sync_interval_ms": 100, "timeout_ms": 250}
T = TypeVar("T")


@dataclass
class Fleet:
    kqps: list[KqpProcess]
    upstream_tap: WireTap
    upstream: Upstream

    def produce_events(self, client_ids: Sequence[str]) -> list[Event]:
        return sorted(e for cid in client_ids
                      for e in request_events(self.upstream_tap.requests(client_id=cid, api_key=ApiKey.Produce)))

    def fetch_events(self, client_ids: Sequence[str], min_bytes: int = 1000) -> list[Event]:
        return sorted(e for cid in client_ids for e in fetch_response_events(self.upstream_tap, cid)
                      if e[1] >= min_bytes)

    def fetch_starts(self, client_id: str, min_bytes: int = 1000) -> list[float]:
        """When each upstream connection first carried records to `client_id`, in order: one per
        member when each member's consumer fetches from one broker, as a one-partition topic makes it."""
        asked = {(r.connection, r.correlation_id)
                 for r in self.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Fetch)}
        first: dict[int, float] = {}
        for r in self.upstream_tap.responses(api_key=ApiKey.Fetch):
            if (r.connection, r.correlation_id) in asked and r.size >= min_bytes:
                first[r.connection] = min(first.get(r.connection, r.at), r.at)
        return sorted(first.values())


def fleet_quotas(entity: dict[str, Any], *, redis_url: str | None, instances: int) -> dict[str, Any]:
    """The quotas section every member gets: `entity` with short windows, cluster scope given a Redis."""
    quotas: dict[str, Any] = {**WINDOWS, "entities": [entity]}
    if redis_url is not None:
        quotas["scope"] = "cluster"
        quotas["cluster"] = {"redis_url": redis_url, "expected_instances": instances, **SYNC}
    return quotas


def open_fleet(stack: contextlib.ExitStack, start_kqp: Callable[..., KqpProcess], upstream: Upstream,
               members: int, quotas: dict[str, Any], **config: Any) -> Fleet:
    upstream_tap = stack.enter_context(WireTap("upstream"))
    relayed = ",".join(upstream_tap.relay(address) for address in broker_addresses(upstream))
    if upstream.kind == "mock":
        config = {**config, "upstream": {"max_api_versions": MOCK_MAX_API_VERSIONS, **config.get("upstream", {})}}
    kqps = [start_kqp(relayed, quotas, **config) for _ in range(members)]
    return Fleet(kqps, upstream_tap, upstream)


def run_all(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Run the client jobs at once, one thread each; their results in order (the first error raised)."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [f.result() for f in futures]


def fleet_rate(events: list[Event], start: float, end: float) -> float:
    """What the upstream received per second between `start` and `end` (least-squares slope)."""
    return cumulative_slope(events, start, end)


def all_report(urls: list[str], check: Callable[[Any], bool], timeout: float) -> float:
    """Seconds until `check(samples)` holds for every instance's /metrics; AssertionError after `timeout`."""
    started = time.monotonic()
    while True:
        if all(check(scrape(url)) for url in urls):
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"not every instance within {timeout}s"
        time.sleep(0.05)


def assert_served_throughout(runs: Sequence[ProduceRun]) -> None:
    """No client noticed the store's trouble: every message acked, no error, no request timed out."""
    for run in runs:
        assert not run.errors, f"{run.client_id}: delivery errors: {run.errors[:5]}"
        assert run.request_timeouts in (None, 0), f"{run.client_id}: {run.request_timeouts} request timeouts"
        assert len(run.acked) == run.sent


def user_quota_fleet(stack: contextlib.ExitStack, start_kqp: Callable[..., KqpProcess], upstream: Upstream,
                     members: int, quota: float, redis_url: str) -> tuple[Fleet, list[str]]:
    """`members` kqp instances in cluster scope sharing `/users/ANONYMOUS`'s producer_byte_rate
    through `redis_url`, each with a metrics endpoint; the fleet and those endpoints' URLs, once
    every instance has counted all the others."""
    quotas = fleet_quotas({"user": "ANONYMOUS", "producer_byte_rate": quota}, redis_url=redis_url, instances=members)
    fleet = open_fleet(stack, start_kqp, upstream, members, quotas, metrics={"listen": "127.0.0.1:0"})
    urls = [metrics_url(proxy) for proxy in fleet.kqps]
    all_report(urls, lambda s: sample(s, "kqp_fleet_instances", backend="redis") == members, 10)
    return fleet, urls


def flood_while(fleet: Fleet, topics: Sequence[str], prefix: str, seconds: float,
                operate: Callable[[float], None], join: float) -> tuple[float, list[ProduceRun], list[BaseException]]:
    """One confluent-kafka producer per instance (client id `prefix-i`, topic i) floods for `seconds`
    while `operate(started)` runs on a thread (joined for at most `join` s after the floods end);
    returns when they started, the runs, and what `operate` raised."""
    failures: list[BaseException] = []

    def guarded(started: float) -> None:
        try:
            operate(started)
        except BaseException as exc:   # reported after the producers are done
            failures.append(exc)

    started = time.monotonic()
    operator = threading.Thread(target=guarded, args=(started,), daemon=True)
    operator.start()
    runs = run_all([lambda k=k, i=i, t=t: confluent_flood(k.bootstrap, t, f"{prefix}-{i}", seconds)
                    for i, (k, t) in enumerate(zip(fleet.kqps, topics, strict=True))])
    operator.join(join)
    return started, runs, failures
