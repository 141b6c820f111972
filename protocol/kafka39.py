"""What Apache Kafka 3.9's message definitions say that kafka-python 3's schemas no longer say.

kafka-python 3 ships Kafka 4's JSON message definitions. Kafka 4 dropped the oldest versions of
several APIs (KIP-896), among them Produce v0-v2 and Fetch v0-v3, and its definitions start at
v3 and v4. A Kafka 3.x upstream still serves those versions, and a client pinned to Kafka 0.10's
versions speaks nothing else. Some APIs kafka-python has no definition for at all (delegation
tokens, KIP-848's ConsumerGroupHeartbeat, KIP-714 telemetry, KIP-932 share groups).

The facts below were read from ``clients/src/main/resources/common/message/*.json`` at Apache
Kafka's ``3.9`` branch (commit c821449fb7c); nothing of those files is copied here:

* ``OLDEST_VERSIONS``: the first version of each side of ProduceRequest/ProduceResponse
  (``validVersions`` "0-11") and FetchRequest/FetchResponse ("0-17"). Every field's own
  ``versions`` range in those four definitions is the same in 3.9 and in the copy kafka-python
  ships, for every version 3.9 defines (the copy adds only v13's TopicId, and Fetch v18's
  HighWatermark), so kqp's walker lays the old versions out from the schema it already has; only
  the lower bound of ``validVersions`` moved. kqp's tests check those layouts against
  kafka-python's hand-written v0-v3 classes (``kafka.protocol.old``), an independent source.
* ``UNSCHEMED``: for each API a broker listener serves that has no definition in kafka-python, its
  newest version, its first flexible version (request and response alike in every one of them, so
  kqp knows the header versions), and whether its response names brokers (a struct with Host and
  Port): kqp cannot rewrite those, so they are never advertised. ShareFetch and ShareAcknowledge
  carry KIP-951-style NodeEndpoints; the controller-only APIs (Vote, FetchSnapshot, ...) are left
  out, as no client reaches them through a broker's listener.
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
