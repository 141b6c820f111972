"""Every real client through kqp against Tansu, topics created through kqp by admin clients (issue 2).

Tansu is one broker (node 111). It would auto-create a topic that a Metadata request names, but
these tests create every topic first, through kqp, with CreateTopics: confluent-kafka's AdminClient
for the librdkafka clients, kafka-python's KafkaAdminClient for the Python ones, so both admin
paths cross kqp.
"""

from __future__ import annotations

import pytest
from helpers.clients import DRIVERS
from helpers.coordinator import GROUP
from helpers.names import unique_topic
from helpers.scenarios import coordinators_show_only_kqp, keyed_round_trip, metadata_shows_only_kqp
from helpers.topics import ADMINS, create_topic, partition_count

pytestmark = pytest.mark.e2e

ADMIN_FOR = {"confluent-kafka": "confluent", "kcat": "confluent",
             "kafka-python": "kafka-python", "aiokafka": "kafka-python"}


@pytest.mark.parametrize("client", sorted(DRIVERS))
def test_client_round_trip_through_kqp(client: str, tansu: str, kqp) -> None:
    proxy = kqp(tansu)
    driver = DRIVERS[client]
    metadata_shows_only_kqp(driver, proxy.bootstrap, tansu, tansu.kind)
    keyed_round_trip(driver, proxy.bootstrap, tansu.kind, admin=ADMIN_FOR[client])


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_creates_topic_through_kqp(admin: str, tansu: str, kqp) -> None:
    proxy = kqp(tansu)
    topic = unique_topic(f"admin-{admin}")
    assert partition_count(proxy.bootstrap, topic) == 0
    create_topic(proxy.bootstrap, topic, 5, admin=admin)
    # Seen with the requested partition count both through kqp and on the upstream itself.
    assert partition_count(proxy.bootstrap, topic) == 5
    assert partition_count(tansu, topic) == 5


def test_find_coordinator_names_only_kqp(tansu: str, kqp) -> None:
    proxy = kqp(tansu)
    assert coordinators_show_only_kqp(proxy.bootstrap, tansu, (GROUP,)) >= 2
