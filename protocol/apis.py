"""Per-API knowledge as tables keyed by api key, built once at import from kafka-python.

kafka-python 3 ships Apache Kafka's JSON message schemas and a request and a response class per
API. From them this module derives what the hot path needs to look up in O(1): which API keys kqp
can decode and at which versions (the schemas' ``validVersions``), which versions are flexible
(``flexibleVersions``) and hence which request/response header version a frame uses, and the
classes to decode with. Nothing here is typed in by hand except one table that lives in Kafka's
Java code rather than in its schemas: ``AbstractResponse.shouldClientThrottle(version)``, the
KIP-219 switch saying from which version a client throttles itself.

Header versions (Kafka's ``ApiKeys.requestHeaderVersion``/``responseHeaderVersion``): request
header v2 and response header v1 for flexible versions, v1 and v0 otherwise, except that an
ApiVersions *response* always uses header v0 (KIP-511: a client must be able to read it before it
knows what the broker supports).
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

from .errors import UnsupportedApi

__all__ = [
    "API_NAMES",
    "API_VERSIONS_KEY",
    "decodable_range",
    "kqp_ranges",
    "message_classes",
    "request_header_version",
    "response_header_version",
    "should_client_throttle",
]

API_VERSIONS_KEY = 18

#: Every api key Kafka defines, named as Kafka names it (also the keys kqp cannot decode, for logs
#: and metrics labels).
API_NAMES: Mapping[int, str] = MappingProxyType({int(k): k.name for k in ApiKey})

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
    return {k: (requests[k], responses[k]) for k in sorted(requests.keys() & responses.keys())}


_CLASSES: dict[int, tuple[type, type]] = _collect()


def _valid_range(req: type, resp: type) -> tuple[int, int]:
    # kafka-python's class attribute keeps the schema's own validVersions (its struct is widened
    # to start at 0; the class-level tuple is not). A version is decodable when both directions
    # have a schema for it.
    rlo, rhi = req.valid_versions
    slo, shi = resp.valid_versions
    return max(rlo, slo), min(rhi, shi)


def _first_flexible(cls: type) -> int:
    flex = cls._flexible_versions
    if flex is None or flex[0] < 0:
        return 1 << 15  # never flexible
    return flex[0]


_RANGES: dict[int, tuple[int, int]] = {k: _valid_range(*c) for k, c in _CLASSES.items()}
# SaslHandshake v0 switches the connection to raw, unframed SASL tokens that carry no Kafka request
# header; kqp attributes every frame by its header, so it offers v1+ only (every client since Kafka 1.0).
_SASL_HANDSHAKE = 17
if _SASL_HANDSHAKE in _RANGES:
    _RANGES[_SASL_HANDSHAKE] = (max(1, _RANGES[_SASL_HANDSHAKE][0]), _RANGES[_SASL_HANDSHAKE][1])
_REQ_FLEX_FROM: dict[int, int] = {k: _first_flexible(c[0]) for k, c in _CLASSES.items()}
_RESP_FLEX_FROM: dict[int, int] = {k: _first_flexible(c[1]) for k, c in _CLASSES.items()}
# KIP-511: ApiVersions responses always carry header v0, whatever the body version.
_RESP_FLEX_FROM[API_VERSIONS_KEY] = 1 << 15

# Kafka's AbstractResponse.shouldClientThrottle(version), per response class in
# clients/src/main/java/org/apache/kafka/common/requests/*Response.java: the first version whose
# client throttles itself on throttle_time_ms (KIP-219). 0 means "every version" (the Java code
# returns true). Response types that do not override the method (DescribeCluster,
# DescribeClientQuotas, DescribeQuorum, DescribeProducers, ...) default to false and are absent.
_CLIENT_THROTTLES_FROM: dict[int, int] = {
    0: 6,  # Produce
    1: 8,  # Fetch
    2: 3,  # ListOffsets
    3: 6,  # Metadata
    8: 4,  # OffsetCommit
    9: 4,  # OffsetFetch
    10: 2,  # FindCoordinator
    11: 3,  # JoinGroup
    12: 2,  # Heartbeat
    13: 2,  # LeaveGroup
    14: 2,  # SyncGroup
    15: 2,  # DescribeGroups
    16: 2,  # ListGroups
    18: 2,  # ApiVersions
    19: 3,  # CreateTopics
    20: 2,  # DeleteTopics
    21: 1,  # DeleteRecords
    22: 1,  # InitProducerId
    24: 1,  # AddPartitionsToTxn
    25: 1,  # AddOffsetsToTxn
    26: 1,  # EndTxn
    28: 1,  # TxnOffsetCommit
    29: 1,  # DescribeAcls
    30: 1,  # CreateAcls
    31: 1,  # DeleteAcls
    32: 2,  # DescribeConfigs
    33: 1,  # AlterConfigs
    34: 1,  # AlterReplicaLogDirs
    35: 1,  # DescribeLogDirs
    37: 1,  # CreatePartitions
    38: 1,  # CreateDelegationToken
    39: 1,  # RenewDelegationToken
    40: 1,  # ExpireDelegationToken
    41: 1,  # DescribeDelegationToken
    42: 1,  # DeleteGroups
    43: 0,  # ElectLeaders
    44: 0,  # IncrementalAlterConfigs
    45: 0,  # AlterPartitionReassignments
    46: 0,  # ListPartitionReassignments
    47: 0,  # OffsetDelete
    50: 0,  # DescribeUserScramCredentials
    51: 0,  # AlterUserScramCredentials
    75: 0,  # DescribeTopicPartitions
}


def decodable_range(api_key: int) -> tuple[int, int] | None:
    """The versions kqp can decode for ``api_key`` (the schema's validVersions), or None if unknown."""
    return _RANGES.get(api_key)


def kqp_ranges() -> dict[int, tuple[int, int]]:
    """Everything kqp can decode: the "ours" side of the ApiVersions intersection."""
    return dict(_RANGES)


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
