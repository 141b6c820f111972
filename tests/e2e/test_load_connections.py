"""Load: 1000 connections producing and fetching through kqp for 60 s, with zero errors.

The workload is `kqp bench --busy`'s (`kqp.proxy.bench.busy_clients`): each connection produces a
batch (acks=1) and fetches it back once a second, checking correlation ids, error codes and that
the Fetch returned records; any mismatch, error code, timeout or dropped connection is an error.
One test, bounded: the clients' own deadline (60 s plus the connection ramp) and a reply timeout.
kqp needs two descriptors per connection, so the open-file limit is raised first (kqp inherits it).
Throughput, RSS and CPU are printed, not asserted: speed belongs to the benchmark (proxy/README.md,
"Later measurements").
"""

from __future__ import annotations

import pytest
from helpers.names import unique_topic
from helpers.net import split_host_port
from helpers.topics import ensure_topic

from kqp.proxy.bench import proc_stats
from kqp.proxy.bench.busy_clients import busy_connections
from kqp.proxy.bench.processes import raise_fd_limit

pytestmark = pytest.mark.e2e

CONNECTIONS = 1000
SECONDS = 60.0
PARTITIONS = 3


def test_1000_connections_produce_and_fetch_for_60_seconds_without_an_error(tansu, kqp) -> None:
    raise_fd_limit()
    proxy = kqp(tansu)
    topic = unique_topic("busy")
    ensure_topic(proxy.bootstrap, topic, PARTITIONS, upstream_kind=tansu.kind)
    host, port = split_host_port(proxy.bootstrap)
    before = proc_stats.sample(proxy.pid)
    result = busy_connections(host, port, topic, PARTITIONS, count=CONNECTIONS, seconds=SECONDS)
    after = proc_stats.sample(proxy.pid)
    if before is not None and after is not None:
        print(f"busy: {result}; kqp CPU {after.cpu_seconds - before.cpu_seconds:.1f} s, "
              f"RSS {after.rss_bytes / 1e6:.0f} MB")
    assert result["connected"] == CONNECTIONS
    assert result["errors"] == 0, result["error_samples"]
    assert result["produce_requests"] >= CONNECTIONS and result["fetch_requests"] == result["produce_requests"]
