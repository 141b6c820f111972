"""What Apache Kafka 3.9's message definitions say that kafka-python 3's schemas no longer say.

kafka-python 3 ships Kafka 4's definitions, which dropped the oldest versions of several APIs
(KIP-896), Produce v0-v2 and Fetch v0-v3 among them, and has none at all for some APIs (delegation
tokens, KIP-848, KIP-714, KIP-932). A Kafka 3.x upstream still serves them. These facts were read
from ``clients/src/main/resources/common/message/*.json`` at Kafka's 3.9 branch (commit
c821449fb7c); nothing of those files is copied:

* ``OLDEST_VERSIONS``: Produce and Fetch start at v0. Every field's version range is the same in
  3.9's definitions and kafka-python's for those versions, so the walker lays the old versions out
  from the schema it has (tests check them against kafka-python's hand-written old classes).
* ``UNSCHEMED``: per API without a schema, its newest and first flexible version (so kqp knows the
  header versions) and whether its response names brokers (then it is never advertised).
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
    newest: int          # validVersions' upper bound in 3.9
    flexible_from: int   # flexibleVersions' lower bound ("0+" -> 0)
    names_brokers: bool  # the response holds a broker endpoint at some version


UNSCHEMED: Mapping[int, Unschemed] = MappingProxyType({
    ApiKey.LeaderAndIsr: Unschemed(7, 4, False),
    ApiKey.StopReplica: Unschemed(4, 2, False),
    ApiKey.UpdateMetadata: Unschemed(8, 6, False),
    ApiKey.ControlledShutdown: Unschemed(3, 3, False),
    ApiKey.CreateDelegationToken: Unschemed(3, 2, False),
    ApiKey.RenewDelegationToken: Unschemed(2, 2, False),
    ApiKey.ExpireDelegationToken: Unschemed(2, 2, False),
    ApiKey.DescribeDelegationToken: Unschemed(3, 2, False),
    ApiKey.AlterPartition: Unschemed(3, 0, False),
    ApiKey.Envelope: Unschemed(0, 0, False),
    ApiKey.UnregisterBroker: Unschemed(0, 0, False),
    ApiKey.AllocateProducerIds: Unschemed(0, 0, False),
    ApiKey.ConsumerGroupHeartbeat: Unschemed(0, 0, False),
    ApiKey.ConsumerGroupDescribe: Unschemed(0, 0, False),
    ApiKey.GetTelemetrySubscriptions: Unschemed(0, 0, False),
    ApiKey.PushTelemetry: Unschemed(0, 0, False),
    ApiKey.ShareGroupHeartbeat: Unschemed(0, 0, False),
    ApiKey.ShareGroupDescribe: Unschemed(0, 0, False),
    ApiKey.ShareFetch: Unschemed(0, 0, True),
    ApiKey.ShareAcknowledge: Unschemed(0, 0, True),
    ApiKey.AddRaftVoter: Unschemed(0, 0, False),
    ApiKey.RemoveRaftVoter: Unschemed(0, 0, False),
    ApiKey.InitializeShareGroupState: Unschemed(0, 0, False),
    ApiKey.ReadShareGroupState: Unschemed(0, 0, False),
    ApiKey.WriteShareGroupState: Unschemed(0, 0, False),
    ApiKey.DeleteShareGroupState: Unschemed(0, 0, False),
    ApiKey.ReadShareGroupStateSummary: Unschemed(0, 0, False),
})
