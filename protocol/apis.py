"""Per-API knowledge as tables keyed by api key, built once at import from kafka-python.

From kafka-python 3's copy of Apache Kafka's JSON message schemas this module derives what the hot
path looks up in O(1): which API keys kqp can decode and at which versions (from v0 for Produce and
Fetch, as Kafka 3.9 defines them: :mod:`kqp.protocol.kafka39`), which versions are flexible and
hence which request and response header versions a frame uses (Kafka's
``ApiKeys.requestHeaderVersion``; an ApiVersions response always uses header v0, KIP-511), and the
classes to decode with. kqp's own definitions of what kafka-python lacks (:mod:`kqp.protocol.kafka44`:
the share fetch APIs, newer versions) join kafka-python's classes here. Nothing else is typed in by
hand but Kafka's version facts and one table that lives in Kafka's Java code rather than in its
schemas: ``AbstractResponse.shouldClientThrottle(version)``, the KIP-219 switch saying from which
version a client throttles itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType, ModuleType

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from . import kafka39, kafka44
from .errors import UnsupportedApi
from .kafka39 import OLDEST_VERSIONS, Unschemed

__all__ = [
    "API_NAMES",
    "GROUP_PROTOCOLS",
    "UNSCHEMED",
    "ApiKey",
    "decodable_range",
    "known_range",
    "kqp_ranges",
    "message_classes",
    "request_header_version",
    "response_header_version",
    "should_client_throttle",
]

# ApiKey (re-exported above) is the one table of API key names (kafka-python's, generated from
# Kafka's schemas): kqp spells an API as ``ApiKey.Produce``, never as a bare integer.

#: Every api key Kafka defines, named as Kafka names it (also the keys kqp cannot decode, for logs
#: and metrics labels).
API_NAMES: Mapping[int, str] = MappingProxyType({**{int(k): k.name for k in ApiKey}, **kafka44.NAMES})

#: The group protocol an API belongs to, for saying what kind of member a client is (a client that
#: sent ShareFetch reads as a share group's member, KIP-932). Names are Kafka's `group.protocol` values.
GROUP_PROTOCOLS: Mapping[int, str] = MappingProxyType({
    ApiKey.JoinGroup: "classic", ApiKey.SyncGroup: "classic",
    ApiKey.ConsumerGroupHeartbeat: "consumer",
    ApiKey.ShareGroupHeartbeat: "share", ApiKey.ShareFetch: "share", ApiKey.ShareAcknowledge: "share",
    ApiKey.StreamsGroupHeartbeat: "streams",
})

#: Per API kqp has no layout for, the facts that let it pass the API on its header alone (Kafka
#: 3.9's, then what Kafka 4.4 changed or added).
UNSCHEMED: Mapping[int, Unschemed] = MappingProxyType({**kafka39.UNSCHEMED, **kafka44.UNSCHEMED})

_MODULES: tuple[ModuleType, ...] = (
    kafka.protocol.admin,
    kafka.protocol.consumer,
    kafka.protocol.metadata,
    kafka.protocol.producer,
    kafka.protocol.sasl,
)


def _collect() -> dict[int, tuple[type, type]]:
    requests: dict[int, type] = {}
    responses: dict[int, type] = {}
    for module in _MODULES:
        for obj in vars(module).values():
            if not (isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage):
                continue
            if getattr(obj, "_class_version", None) is not None:
                continue  # a versioned wrapper such as MetadataRequest_v3
            (requests if obj.is_request() else responses)[obj.API_KEY] = obj
    for obj in kafka44.MESSAGES:   # kqp's own, where kafka-python has none or an older version
        (requests if obj.is_request() else responses)[obj.API_KEY] = obj
    return {k: (requests[k], responses[k]) for k in sorted(requests.keys() & responses.keys())}


_CLASSES: dict[int, tuple[type, type]] = _collect()


def _valid_range(req: type, resp: type) -> tuple[int, int]:
    # kafka-python's class attribute keeps the schema's own validVersions (its struct is widened
    # to start at 0; the class-level tuple is not). A version is decodable when both directions
    # have a schema for it, or, below that, when Kafka 3.9 defined it and the schema's field
    # ranges still describe it (`kafka39.OLDEST_VERSIONS`: Produce v0-v2, Fetch v0-v3).
    rlo, rhi = req.valid_versions
    slo, shi = resp.valid_versions
    return min(max(rlo, slo), OLDEST_VERSIONS.get(req.API_KEY, 1 << 15)), min(rhi, shi)


def _first_flexible(cls: type) -> int:
    flex = cls._flexible_versions
    if flex is None or flex[0] < 0:
        return 1 << 15  # never flexible
    return flex[0]


_RANGES: dict[int, tuple[int, int]] = {k: _valid_range(*c) for k, c in _CLASSES.items()}
# SaslHandshake v0 switches the connection to raw, unframed SASL tokens that carry no Kafka request
# header, which kqp cannot attribute; yet it stays advertised: librdkafka (kcat's 2.0 among others)
# detects SASL support by SaslHandshake v0 in the ApiVersions answer and gives up without it, then
# sends v1 because SaslAuthenticate is advertised. A v0 handshake that does arrive is refused and
# its connection closed (`kqp.proxy.connection.authentication`).
_REQ_FLEX_FROM: dict[int, int] = {k: _first_flexible(c[0]) for k, c in _CLASSES.items()}
_RESP_FLEX_FROM: dict[int, int] = {k: _first_flexible(c[1]) for k, c in _CLASSES.items()}
# APIs kqp has no layout for: their header versions from Kafka's definitions, so that kqp can pass
# them on their header alone (`kqp.protocol.advertised`).
for _key, _facts in UNSCHEMED.items():
    _REQ_FLEX_FROM[_key] = _RESP_FLEX_FROM[_key] = _facts.flexible_from
# KIP-511: ApiVersions responses always carry header v0, whatever the body version.
_RESP_FLEX_FROM[ApiKey.ApiVersions] = 1 << 15

# Kafka's AbstractResponse.shouldClientThrottle(version), per response class in
# clients/src/main/java/org/apache/kafka/common/requests/*Response.java: the first version whose
# client throttles itself on throttle_time_ms (KIP-219). 0 means "every version" (the Java code
# returns true). Response types that do not override the method (DescribeCluster,
# DescribeClientQuotas, DescribeQuorum, DescribeProducers, ...) default to false and are absent.
_CLIENT_THROTTLES_FROM: dict[int, int] = {
    ApiKey.Produce: 6,
    ApiKey.Fetch: 8,
    ApiKey.ListOffsets: 3,
    ApiKey.Metadata: 6,
    ApiKey.OffsetCommit: 4,
    ApiKey.OffsetFetch: 4,
    ApiKey.FindCoordinator: 2,
    ApiKey.JoinGroup: 3,
    ApiKey.Heartbeat: 2,
    ApiKey.LeaveGroup: 2,
    ApiKey.SyncGroup: 2,
    ApiKey.DescribeGroups: 2,
    ApiKey.ListGroups: 2,
    ApiKey.ApiVersions: 2,
    ApiKey.CreateTopics: 3,
    ApiKey.DeleteTopics: 2,
    ApiKey.DeleteRecords: 1,
    ApiKey.InitProducerId: 1,
    ApiKey.AddPartitionsToTxn: 1,
    ApiKey.AddOffsetsToTxn: 1,
    ApiKey.EndTxn: 1,
    ApiKey.TxnOffsetCommit: 1,
    ApiKey.DescribeAcls: 1,
    ApiKey.CreateAcls: 1,
    ApiKey.DeleteAcls: 1,
    ApiKey.DescribeConfigs: 2,
    ApiKey.AlterConfigs: 1,
    ApiKey.AlterReplicaLogDirs: 1,
    ApiKey.DescribeLogDirs: 1,
    ApiKey.CreatePartitions: 1,
    ApiKey.CreateDelegationToken: 1,
    ApiKey.RenewDelegationToken: 1,
    ApiKey.ExpireDelegationToken: 1,
    ApiKey.DescribeDelegationToken: 1,
    ApiKey.DeleteGroups: 1,
    ApiKey.ElectLeaders: 0,
    ApiKey.IncrementalAlterConfigs: 0,
    ApiKey.AlterPartitionReassignments: 0,
    ApiKey.ListPartitionReassignments: 0,
    ApiKey.OffsetDelete: 0,
    ApiKey.DescribeUserScramCredentials: 0,
    ApiKey.AlterUserScramCredentials: 0,
    ApiKey.DescribeTopicPartitions: 0,
}


def decodable_range(api_key: int) -> tuple[int, int] | None:
    """The versions kqp can decode for ``api_key`` (the schema's validVersions), or None if unknown."""
    return _RANGES.get(api_key)


def kqp_ranges() -> dict[int, tuple[int, int]]:
    """Everything kqp can decode (what it advertises adds header-only versions: ``advertised``)."""
    return dict(_RANGES)


def known_range(api_key: int) -> tuple[int, int] | None:
    """The versions Kafka's definitions that kqp carries describe for ``api_key`` (kafka-python's
    schema, or Kafka 3.9's facts for APIs it has none for), from 0; None for a key neither knows."""
    cls = _CLASSES.get(api_key)
    if cls is not None:
        return 0, _RANGES[api_key][1]
    facts = UNSCHEMED.get(api_key)
    return None if facts is None else (0, facts.newest)


def request_header_version(api_key: int, version: int) -> int:
    """1 or 2. Raises UnsupportedApi for an api key kqp does not know."""
    flex_from = _REQ_FLEX_FROM.get(api_key)
    if flex_from is None:
        raise UnsupportedApi(f"unknown api key {api_key}")
    return 2 if version >= flex_from else 1


def response_header_version(api_key: int, version: int) -> int:
    """0 or 1 (ApiVersions: always 0). Raises UnsupportedApi for an api key kqp does not know."""
    flex_from = _RESP_FLEX_FROM.get(api_key)
    if flex_from is None:
        raise UnsupportedApi(f"unknown api key {api_key}")
    return 1 if version >= flex_from else 0


def should_client_throttle(api_key: int, version: int) -> bool:
    """Whether a client reading this response version throttles itself (KIP-219)."""
    since = _CLIENT_THROTTLES_FROM.get(api_key)
    return since is not None and version >= since


def message_classes(api_key: int) -> tuple[type, type]:
    """kafka-python's (request class, response class) for ``api_key``."""
    try:
        return _CLASSES[api_key]
    except KeyError:
        raise UnsupportedApi(f"unknown api key {api_key}") from None
