"""What Apache Kafka 3.9's message definitions say that kafka-python 3's schemas no longer say.

kafka-python 3 ships Kafka 4's definitions, which dropped the oldest versions of several APIs
(KIP-896), Produce v0-v2 and Fetch v0-v3 among them, and has none for some APIs (delegation tokens,
KIP-714). A Kafka 3.x upstream still serves them. Read from Kafka's 3.9 branch's message definitions
(commit c821449fb7c), nothing of them copied (Kafka 4.4's changes: :mod:`kqp.protocol.kafka44`):

* ``OLDEST_VERSIONS``: Produce and Fetch start at v0. Every field's version range is the same in
  3.9's definitions and kafka-python's for those versions, so the walker lays the old versions out
  from the schema it has (tests check them against kafka-python's hand-written old classes).
* ``UNSCHEMED``: per API without a schema, its newest and first flexible version (so kqp knows the
  header versions), whether its response names brokers (then it is never advertised) and whether
  ``throttle_time_ms`` is its response's first field (then kqp tells a throttle there too).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from kafka.protocol.api_key import ApiKey

__all__ = ["OLDEST_VERSIONS", "UNSCHEMED", "Unschemed"]

#: api key -> the first version Kafka 3.9 defines, where it is below kafka-python's schema's.
OLDEST_VERSIONS: Mapping[int, int] = MappingProxyType({ApiKey.Produce: 0, ApiKey.Fetch: 0})


class Unschemed(NamedTuple):
    newest: int          # validVersions' upper bound
    flexible_from: int   # flexibleVersions' lower bound ("0+" -> 0)
    names_brokers: bool  # the response holds a broker endpoint at some version
    throttle_first: bool = False   # every version's response starts with throttle_time_ms


UNSCHEMED: Mapping[int, Unschemed] = MappingProxyType({
    ApiKey.LeaderAndIsr: Unschemed(7, 4, False),
    ApiKey.StopReplica: Unschemed(4, 2, False),
    ApiKey.UpdateMetadata: Unschemed(8, 6, False),
    ApiKey.ControlledShutdown: Unschemed(3, 3, False),
    ApiKey.CreateDelegationToken: Unschemed(3, 2, False),
    ApiKey.RenewDelegationToken: Unschemed(2, 2, False),
    ApiKey.ExpireDelegationToken: Unschemed(2, 2, False),
    ApiKey.DescribeDelegationToken: Unschemed(3, 2, False),
    ApiKey.AlterPartition: Unschemed(3, 0, False, throttle_first=True),
    ApiKey.Envelope: Unschemed(0, 0, False),
    ApiKey.UnregisterBroker: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.AllocateProducerIds: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.GetTelemetrySubscriptions: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.PushTelemetry: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.RemoveRaftVoter: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.InitializeShareGroupState: Unschemed(0, 0, False),
    ApiKey.ReadShareGroupState: Unschemed(0, 0, False),
    ApiKey.DeleteShareGroupState: Unschemed(0, 0, False),
})
