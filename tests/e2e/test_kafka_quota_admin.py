"""Kafka's client-quota admin API through kqp in front of Apache Kafka: kqp's quotas beside Kafka's own.

With `admin.manage_quotas: true` kqp answers DescribeClientQuotas and AlterClientQuotas itself: a
quota altered through kqp (with Kafka's own tool, `kafka-configs.sh`'s ConfigCommand from the Kafka
4.4 jars) is in force in kqp and absent from Kafka, and a quota set directly on Kafka is Kafka's
alone: Kafka shows and enforces it (also behind kqp, whose answers carry the upstream's throttle),
while kqp's describe does not list it. With `manage_quotas: false` both requests go through to
Kafka. No Python client has a client-quota API (see test_quota_admin.py), so besides the Java tool
the requests are raw frames built with kafka-python's message classes.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.raw_client import RawConnection, Tally
from helpers.topics import create_topic
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe
from upstreams import jvm
from upstreams.launch import Upstream

from e2e.test_quota_admin import alter, describe

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("upstream", ["kafka"], indirect=True)]

RATE = 1024          # producer_byte_rate, bytes/s
BURST = [b"x" * 1000] * 20   # one 20 kB request: over 1 kB/s at once


def config_command(bootstrap: str, *args: str) -> None:
    """Kafka's `kafka-configs.sh` (org.apache.kafka.tools.ConfigCommand) against `bootstrap`."""
    done = subprocess.run([jvm.java(), "-Xmx256m", "-XX:+UseSerialGC", "-cp", jvm.classpath("kafka"),
                           "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"ConfigCommand {args} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"


def quotas_of(bootstrap: str, client_id: str) -> dict[str, dict[str, float]]:
    """DescribeClientQuotas for one client id, as `bootstrap` answers it."""
    with RawConnection(bootstrap, "quota-reader", Tally()) as conn:
        return describe(conn, components=[Describe.ComponentData(entity_type="client-id", match_type=0,
                                                                  match=client_id)])


def quotas_settled(bootstrap: str, client_id: str, want: dict[str, dict[str, float]],
                   wait: float = 15.0) -> dict[str, dict[str, float]]:
    """`quotas_of`, asked again every 0.2 s for up to `wait` s until it answers `want`: Kafka
    acknowledges an AlterClientQuotas once its controller has the record, and its broker describes the
    change only once the record has reached it."""
    deadline = time.monotonic() + wait
    while (found := quotas_of(bootstrap, client_id)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def throttled(bootstrap: str, topic: str, client_id: str, wait: float = 0.0) -> int:
    """The throttle_time_ms of a 20 kB produce by `client_id`, retried for `wait` s until non-zero
    (Kafka applies a quota once its controller's record reaches the broker)."""
    deadline = time.monotonic() + wait
    while True:
        with RawConnection(bootstrap, "leader-lookup", Tally()) as boot, \
                RawConnection(boot.leader_address(topic), client_id, Tally()) as leader:
            leader.produce(topic, BURST)
            throttle = leader.tally.throttle_ms[0]
        if throttle > 0 or time.monotonic() >= deadline:
            return throttle
        time.sleep(0.2)


def test_kqp_manages_its_own_quotas_beside_kafkas(upstream: Upstream, kqp: Any, tmp_path: Path) -> None:
    proxy = kqp(upstream, {}, admin={"manage_quotas": True, "principals": ["User:ANONYMOUS"],
                                     "state_file": str(tmp_path / "quota-state.yaml")})
    topic = unique_topic("quota-admin")
    create_topic(proxy.bootstrap, topic, 1)
    ours, kafkas = unique_topic("by-kqp"), unique_topic("by-kafka")

    # Altered through kqp with Kafka's own tool: kqp's, enforced by kqp, unknown to Kafka.
    config_command(proxy.bootstrap, "--alter", "--add-config", f"producer_byte_rate={RATE}",
                   "--entity-type", "clients", "--entity-name", ours)
    assert quotas_of(proxy.bootstrap, ours) == {f"client-id={ours}": {"producer_byte_rate": RATE}}
    assert quotas_of(upstream, ours) == {}, "a quota altered through kqp reached Kafka"
    assert throttled(proxy.bootstrap, topic, ours) > 0
    assert throttled(upstream, topic, ours) == 0

    # Set on Kafka directly: Kafka's, shown and enforced by Kafka (behind kqp too), not kqp's.
    config_command(upstream, "--alter", "--add-config", f"producer_byte_rate={RATE}",
                   "--entity-type", "clients", "--entity-name", kafkas)
    try:
        set_on_kafka = {f"client-id={kafkas}": {"producer_byte_rate": RATE}}
        assert quotas_settled(upstream, kafkas, set_on_kafka) == set_on_kafka
        assert quotas_of(proxy.bootstrap, kafkas) == {}
        assert throttled(upstream, topic, kafkas, wait=10) > 0
        assert throttled(proxy.bootstrap, topic, kafkas, wait=10) > 0, "Kafka's own throttle did not reach the client"
    finally:
        with RawConnection(upstream, "quota-cleanup", Tally()) as conn:
            alter(conn, [("client-id", kafkas)], [("producer_byte_rate", 0, True)])


def test_without_manage_quotas_the_requests_reach_kafka(upstream: Upstream, kqp: Any) -> None:
    proxy = kqp(upstream)
    client_id = unique_topic("through-kqp")
    with RawConnection(proxy.bootstrap, "quota-writer", Tally()) as conn:
        assert alter(conn, [("client-id", client_id)], [("producer_byte_rate", RATE, False)]) == (0, None)
    try:
        written = {f"client-id={client_id}": {"producer_byte_rate": RATE}}
        assert quotas_settled(upstream, client_id, written) == written
        assert quotas_of(proxy.bootstrap, client_id) == quotas_of(upstream, client_id)
    finally:
        with RawConnection(proxy.bootstrap, "quota-cleanup", Tally()) as conn:
            assert alter(conn, [("client-id", client_id)], [("producer_byte_rate", 0, True)]) == (0, None)
    assert quotas_settled(upstream, client_id, {}) == {}
