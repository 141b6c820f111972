"""Test bodies the client matrices share: one keyed round trip through kqp, judged the same way for all.

Kept out of the test modules so the mock-cluster matrix, the Tansu matrix and the direct-failure
tests run literally the same scenario and differ only in upstream and client.
"""

from __future__ import annotations

import time

from kafka.protocol.metadata import FindCoordinatorRequest

from kqp.protocol.apis import ApiKey

from .checks import assert_exactly_once_in_order, assert_only_kqp_addresses, expected_broker_count
from .clients import ClientDriver, Consumed, keyed_messages
from .coordinator import GROUP, advertised_versions, find_coordinator
from .names import unique_group, unique_topic
from .topics import ensure_topic

MESSAGES = 150
PARTITIONS = 3
CONSUME_TIMEOUT = 60.0


def keyed_round_trip(driver: ClientDriver, via: str, upstream_kind: str, *, admin: str = "confluent",
                     count: int = MESSAGES, partitions: int = PARTITIONS) -> list[Consumed]:
    """Produce `count` keyed messages with `driver` through `via`, consume them in a fresh group, check."""
    topic = unique_topic(f"rt-{driver.name}")
    ensure_topic(via, topic, partitions, upstream_kind=upstream_kind, admin=admin)
    messages = keyed_messages(count)
    driver.produce(via, topic, messages)
    consumed = driver.consume_group(via, topic, unique_group(f"g-{driver.name}"), count, CONSUME_TIMEOUT)
    assert_exactly_once_in_order(messages, consumed)
    used = {c.partition for c in consumed}
    assert len(used) >= 2, f"all messages landed on partitions {used}: the test proves nothing about order"
    return consumed


def metadata_shows_only_kqp(driver: ClientDriver, kqp_bootstrap: str, upstream: str,
                            upstream_kind: str) -> None:
    """The broker list `driver` learns through kqp names kqp's listeners only, one per upstream broker."""
    seen = driver.brokers(kqp_bootstrap)
    assert_only_kqp_addresses(seen, kqp_bootstrap, upstream, expected_broker_count(upstream_kind, upstream))


def coordinators_show_only_kqp(kqp_bootstrap: str, upstream: str, key_types: tuple[int, ...]) -> int:
    """FindCoordinator through kqp, at every version kqp offers, names kqp's listeners; versions asked."""
    low, high = advertised_versions(kqp_bootstrap)[ApiKey.FindCoordinator]
    asked = 0
    for version in range(low, min(high, FindCoordinatorRequest.max_version) + 1):
        for key_type in key_types if version >= 1 else (GROUP,):
            key = unique_topic(f"coord-v{version}-t{key_type}")
            deadline = time.monotonic() + 20
            # A fresh coordinator key may answer COORDINATOR_NOT_AVAILABLE (15) for a moment.
            while (answer := find_coordinator(kqp_bootstrap, key, key_type, version))[0] == 15:
                assert time.monotonic() < deadline, f"no coordinator for {key} within 20s"
                time.sleep(0.2)
            error_code, host, port = answer
            assert error_code == 0, f"FindCoordinator v{version} key_type {key_type}: error {error_code}"
            assert_only_kqp_addresses([(host, port)], kqp_bootstrap, upstream)
            asked += 1
    return asked
