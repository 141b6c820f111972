"""`kqp run --workers 2` holds one quota, not two: through its parent process, or through Redis.

One `kqp run --workers 2` (fixed ports, SO_REUSEPORT) in front of the upstream tap and a
one-broker mock cluster; two confluent-kafka producers with the same client id. The kernel spreads
connections over the workers by a hash, so each producer is placed first: it sends one message, and
the worker whose `kqp_connections{listener="broker-N"}` grew is the one holding its connection; a
producer that landed on the worker already taken is dropped and another made, until one producer
writes through each worker. Then both flood for eleven seconds. Judged on the wire after the first
burst: the upstream receives the quota Q within 20%, not 2Q. Both workers report sharing with two
instances. Without Redis the parent serves the exchange (instance scope); with Redis each worker is
a fleet instance (cluster scope).
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from helpers.fleet_path import SPAN, fleet_quotas, fleet_rate, open_fleet, run_all
from helpers.names import unique_topic
from helpers.net import LOOPBACK, free_port
from helpers.observability import sample, scrape
from helpers.quota_clients import FloodProducer, confluent_flood, confluent_producer, read_partition
from helpers.quota_path import quota_upstream
from helpers.redis_server import needs_redis, redis_server
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

pytestmark = [pytest.mark.e2e, needs_redis]

QUOTA = 150_000
WORKERS = 2
OFFER_SECONDS = 11.0
TOLERANCE = 0.20
WARM_UP = b"warm-up"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with quota_upstream(tmp_path_factory.mktemp("fleet-workers")) as bootstrap:
        yield bootstrap


def consecutive_free_ports(count: int) -> int:
    """A port p such that p .. p + count - 1 were all free a moment ago (one metrics port per worker).

    Tried below the kernel's ephemeral range, and bound as the servers will bind them (SO_REUSEADDR):
    a run inside that range, where a busy machine's closed connections wait in TIME_WAIT, failed a
    hundred tries in one full run."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(max(1024, low - 12_000), low - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((LOOPBACK, port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no run of free ports")


def broker_ids(bootstrap: str) -> list[int]:
    probe = Producer({"bootstrap.servers": bootstrap, "client.id": "kqp-test-probe"})
    return sorted(probe.list_topics(timeout=15).brokers)


def place(bootstrap: str, client_id: str, topic: str, urls: list[str], listener: str, worker: int) -> FloodProducer:
    """A producer whose broker connection is held by `worker` (see the module docstring)."""
    for _ in range(40):
        before = [sample(scrape(u), "kqp_connections", listener=listener) or 0 for u in urls]
        made = confluent_producer(bootstrap, client_id)
        made.producer.produce(topic, WARM_UP, partition=0)
        assert made.producer.flush(15) == 0, "the warm-up message was not delivered"
        after = [sample(scrape(u), "kqp_connections", listener=listener) or 0 for u in urls]
        grown = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if a > b]
        if grown == [worker]:
            return made
        del made   # librdkafka closes its connections when the producer is destroyed
    raise AssertionError(f"no producer landed on worker {worker} in 40 tries")


@pytest.mark.parametrize("through", ["parent", "redis"])
def test_two_workers_hold_one_quota(through: str, kqp: Any, upstream: Upstream, tmp_path: Path) -> None:
    client_id = unique_topic(f"fleet-workers-{through}")
    topics = [unique_topic(f"fleet-workers-{i}") for i in range(WORKERS)]
    for topic in topics:
        ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    metrics_base = consecutive_free_ports(WORKERS)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server(tmp_path / "redis.log")).url if through == "redis" else None
        quotas = fleet_quotas({"client_id": client_id, "producer_byte_rate": QUOTA}, redis_url=url,
                              instances=WORKERS)
        ids = broker_ids(upstream)
        # --workers needs fixed ports: pin one per broker id (the tap keeps the upstream's ids).
        fleet = open_fleet(stack, kqp, upstream, 1, quotas, extra_args=("--workers", str(WORKERS)),
                           broker_ports={i: free_port() for i in ids},
                           metrics={"listen": f"{LOOPBACK}:{metrics_base}"})
        urls = [f"http://{LOOPBACK}:{metrics_base + i}" for i in range(WORKERS)]
        proxy = fleet.kqps[0]
        deadline = time.monotonic() + 15
        while sum("kqp ready" in line for line in proxy.log_lines()) < WORKERS:   # every worker, not the first
            assert time.monotonic() < deadline and proxy.running, f"workers not ready:\n{proxy.logs()[-3000:]}"
            time.sleep(0.05)
        bootstrap = fleet.kqps[0].bootstrap
        listener = f"broker-{ids[0]}"
        made = [place(bootstrap, client_id, topics[i], urls, listener, i) for i in range(WORKERS)]
        runs = run_all([lambda m=m, t=t: confluent_flood(bootstrap, t, client_id, OFFER_SECONDS, made=m)
                        for m, t in zip(made, topics, strict=True)])
        backend = "redis" if through == "redis" else "workers"
        for worker_url in urls:
            samples = scrape(worker_url)
            assert sample(samples, "kqp_fleet_sync_up", backend=backend) == 1.0
            assert sample(samples, "kqp_fleet_instances", backend=backend) == WORKERS
        events = fleet.produce_events([client_id])
    for run, topic in zip(runs, topics, strict=True):
        assert not run.errors and run.request_timeouts in (None, 0), f"{run.errors[:5]}, {run.request_timeouts}"
        stored = Counter(read_partition(upstream, topic))
        assert all(stored[v] == 1 for v in run.acked) and len(run.acked) == run.sent
    start, end = events[0][0] + 2 * SPAN, min(run.offered_until for run in runs)
    rate = fleet_rate(events, start, end)
    print(f"\nFLEET --workers {WORKERS} through {through}: upstream {rate / 1000:.1f} KB/s = {rate / QUOTA:.2f} Q "
          f"over {end - start:.1f}s")
    assert abs(rate - QUOTA) <= TOLERANCE * QUOTA, \
        f"--workers {WORKERS} ({through}): the upstream received {rate / QUOTA:.2f} x the quota"
