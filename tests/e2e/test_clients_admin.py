"""Every real client through kqp against Tansu and Apache Kafka, topics created through kqp by admin clients.

Tansu is one broker (node 111); Kafka one KRaft node. Both would auto-create a topic that a Metadata
request names, but these tests create every topic first, through kqp, with CreateTopics:
confluent-kafka's AdminClient for the librdkafka clients, kafka-python's KafkaAdminClient for the
Python ones, so both admin paths cross kqp. (The mock cluster has no CreateTopics: test_clients_mock.py.)
"""

from __future__ import annotations

import pytest
from helpers.clients import DRIVERS
from helpers.coordinator import GROUP
from helpers.names import unique_topic
from helpers.scenarios import coordinators_show_only_kqp, keyed_round_trip, metadata_shows_only_kqp
from helpers.topics import ADMINS, create_topic, partition_count
from upstreams.launch import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("upstream", ["tansu", "kafka"], indirect=True)]

ADMIN_FOR = {"confluent-kafka": "confluent", "kcat": "confluent",
             "kafka-python": "kafka-python", "aiokafka": "kafka-python"}


@pytest.mark.parametrize("client", sorted(DRIVERS))
def test_client_round_trip_through_kqp(client: str, upstream: Upstream, kqp) -> None:
    proxy = kqp(upstream)
    driver = DRIVERS[client]
    metadata_shows_only_kqp(driver, proxy.bootstrap, upstream, upstream.kind)
    keyed_round_trip(driver, proxy.bootstrap, upstream.kind, admin=ADMIN_FOR[client])


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_creates_topic_through_kqp(admin: str, upstream: Upstream, kqp) -> None:
    proxy = kqp(upstream)
    topic = unique_topic(f"admin-{admin}")
    assert partition_count(proxy.bootstrap, topic) == 0
    create_topic(proxy.bootstrap, topic, 5, admin=admin)
    # Seen with the requested partition count both through kqp and on the upstream itself.
    assert partition_count(proxy.bootstrap, topic) == 5
    assert partition_count(upstream, topic) == 5


def test_find_coordinator_names_only_kqp(upstream: Upstream, kqp) -> None:
    proxy = kqp(upstream)
    assert coordinators_show_only_kqp(proxy.bootstrap, upstream, (GROUP,)) >= 2
