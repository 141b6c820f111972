"""The path every quota test measures: client -> client tap -> kqp -> upstream tap -> upstream.

The upstream tap proves what reached the cluster and when; the client tap proves what the client
was told (throttle_time_ms) and when, and whether it gave up on a request. Both taps rewrite
addresses, so no connection on either side can slip past them after Metadata.

Upstream: a one-broker librdkafka mock cluster, so each client has exactly one data connection to
judge, or the real cluster named by KQP_TEST_BOOTSTRAP (then every broker gets a hop). kqp runs as
a real `kqp run` subprocess started by the conftest `kqp` factory, with the upstream tap as its
upstream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from upstreams import launch
from upstreams.launch import Upstream

from .kqp_process import KqpProcess
from .wire_tap import WireTap

# librdkafka's mock cluster advertises flexible group-API versions it cannot parse; capping what kqp
# advertises keeps kafka-python's and aiokafka's group clients on versions the mock serves.
MOCK_MAX_API_VERSIONS = {"JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "LeaveGroup": 2,
                         "OffsetCommit": 7, "OffsetFetch": 5}
PROBE_CLIENT_ID = "kqp-test-probe"   # never under a quota in these tests


@contextlib.contextmanager
def quota_upstream(log_dir: Path) -> Iterator[Upstream]:
    """A one-broker mock cluster (or the KQP_TEST_BOOTSTRAP cluster) for the duration of the block."""
    real = launch.real_cluster()
    if real is not None:
        yield real
        return
    with launch.mock_cluster(log_dir / "mock-1-broker.log", brokers=1) as bootstrap:
        yield bootstrap


def broker_addresses(bootstrap: str, timeout: float = 15.0, **conf: Any) -> list[tuple[str, int]]:
    """Every broker's advertised (host, port), from a Metadata request to `bootstrap` (`conf`: more
    librdkafka settings, such as a SASL login)."""
    probe = Producer({"bootstrap.servers": bootstrap, "client.id": PROBE_CLIENT_ID, **conf})
    metadata = probe.list_topics(timeout=timeout)
    return sorted((b.host, b.port) for b in metadata.brokers.values())


@dataclass
class QuotaPath:
    kqp: KqpProcess
    client_tap: WireTap
    upstream_tap: WireTap
    upstream: Upstream

    @property
    def bootstrap(self) -> str:
        """What clients put in bootstrap.servers: kqp's bootstrap listener, through the client tap."""
        return self.client_tap.hops[_split(self.kqp.bootstrap)]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def open_quota_path(stack: contextlib.ExitStack, start_kqp: Callable[..., KqpProcess], upstream: Upstream,
                    quotas: dict[str, Any] | None, probe_conf: dict[str, Any] | None = None,
                    **config: Any) -> QuotaPath:
    """Taps on both sides of a fresh kqp with `quotas`; everything is closed by `stack`. `probe_conf`:
    the librdkafka settings kqp's clients need (a SASL login when kqp terminates SASL)."""
    upstream_tap = stack.enter_context(WireTap("upstream"))
    relayed = [upstream_tap.relay(address) for address in broker_addresses(upstream)]
    if upstream.kind == "mock":
        config = {**config, "upstream": {"max_api_versions": MOCK_MAX_API_VERSIONS,
                                         **config.get("upstream", {})}}
    proc = start_kqp(",".join(relayed), quotas, **config)
    client_tap = stack.enter_context(WireTap("client"))
    client_tap.relay(proc.bootstrap)
    for address in broker_addresses(proc.bootstrap, **(probe_conf or {})):
        client_tap.relay(address)
    return QuotaPath(proc, client_tap, upstream_tap, upstream)
