"""Create topics, through kqp, the way each upstream allows, and read back their partition counts.

The mock cluster has no CreateTopics (its admin call just times out) but auto-creates a topic,
with 4 partitions, on the first Metadata request that names it; Tansu and real clusters create
topics through the admin API. Tests say how many partitions they need and this module finds the
way, so the same test body runs on every upstream.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from helpers.names import unique_topic

ADMINS = ("confluent", "kafka-python")


def partition_count(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    """Partitions of `topic` as seen through `bootstrap` (0 if the topic is unknown)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # All-topics Metadata: a request naming the topic would make Tansu auto-create it.
    metadata = admin.list_topics(timeout=timeout)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return 0
    return len(found.partitions)


def create_topic(bootstrap: str, topic: str, partitions: int, *, admin: str = "confluent",
                 timeout: float = 20.0) -> None:
    """CreateTopics through `bootstrap` with the chosen admin client; wait until Metadata shows it."""
    if admin == "confluent":
        client = AdminClient({"bootstrap.servers": bootstrap})
        futures = client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                       operation_timeout=timeout)
        futures[topic].result(timeout)
    elif admin == "kafka-python":
        from kafka.admin import KafkaAdminClient
        from kafka.admin import NewTopic as KNewTopic

        kclient = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            kclient.create_topics([KNewTopic(topic, partitions, 1)], timeout_ms=int(timeout * 1000))
        finally:
            kclient.close()
    else:
        raise ValueError(f"unknown admin client {admin!r}; expected one of {ADMINS}")
    wait_partitions(bootstrap, topic, partitions, timeout)


def auto_create_topic(bootstrap: str, topic: str, timeout: float = 20.0) -> int:
    """Make the upstream auto-create `topic` with a Metadata request naming it; its partition count."""
    # A producer's Metadata request sets allow_auto_topic_creation, which the mock honours.
    producer = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True})
    deadline = time.monotonic() + timeout
    while True:
        metadata = producer.list_topics(topic=topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"topic {topic} was not auto-created within {timeout}s")
        time.sleep(0.1)


def wait_partitions(bootstrap: str, topic: str, partitions: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (seen := partition_count(bootstrap, topic)) != partitions:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{topic}: metadata shows {seen} partitions, wanted {partitions}")
        time.sleep(0.1)


def ensure_topic(bootstrap: str, topic: str, partitions: int, *, upstream_kind: str,
                 admin: str = "confluent") -> int:
    """A topic with at least `partitions` partitions (exactly, where the upstream lets us choose)."""
    if upstream_kind == "mock":
        count = auto_create_topic(bootstrap, topic)
        assert count >= partitions, f"mock cluster auto-created {count} partitions, test needs {partitions}"
        return count
    create_topic(bootstrap, topic, partitions, admin=admin)
    return partitions


def partition_leaders(bootstrap: str, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """Partition -> its leader's node id, from Metadata naming `topic`."""
    metadata = Producer({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def spread_mock_topic(bootstrap: str, prefix: str, tries: int = 10) -> tuple[str, dict[int, int]]:
    """A new auto-created topic of the mock cluster whose partitions have at least two leaders, and
    its partition -> leader map. The mock places each partition's leader at random, so its 4
    partitions on 3 brokers share one leader about 1 time in 27 (seen in a full run): then another
    name is tried, which makes a topic on one leader 1 in 27^10."""
    for _ in range(tries):
        topic = unique_topic(prefix)
        auto_create_topic(bootstrap, topic)
        leaders = partition_leaders(bootstrap, topic)
        if len(set(leaders.values())) >= 2:
            return topic, leaders
    raise AssertionError(f"{tries} topics of {bootstrap} each had every partition on one leader")
