"""Every real client through kqp against librdkafka's 3-broker mock cluster (issue 2, transparent proxy).

Each client produces keyed messages to a multi-partition topic and reads them back in a consumer
group: every message exactly once, producer order kept per partition. The broker list the client
learns must name only kqp's own listeners, or its next connection would bypass kqp (and its quotas).
"""

from __future__ import annotations

import pytest
from helpers.clients import DRIVERS
from helpers.coordinator import GROUP, TRANSACTION
from helpers.scenarios import coordinators_show_only_kqp, keyed_round_trip, metadata_shows_only_kqp

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("client", sorted(DRIVERS))
def test_client_round_trip_through_kqp(client: str, mock_cluster: str, kqp) -> None:
    proxy = kqp(mock_cluster)
    driver = DRIVERS[client]
    metadata_shows_only_kqp(driver, proxy.bootstrap, mock_cluster, mock_cluster.kind)
    keyed_round_trip(driver, proxy.bootstrap, mock_cluster.kind)


def test_find_coordinator_names_only_kqp(mock_cluster: str, kqp) -> None:
    # Group and transaction coordinators: a leaked address would let a consumer group or a
    # transactional producer talk to the upstream directly, and the round trips above still pass.
    proxy = kqp(mock_cluster)
    assert coordinators_show_only_kqp(proxy.bootstrap, mock_cluster, (GROUP, TRANSACTION)) >= 2
