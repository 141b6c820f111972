"""What Apache Kafka 4.4's message definitions say that kafka-python 3's schemas do not.

kafka-python 3 has no schema for the share group (KIP-932) and streams group (KIP-1071) APIs and a
few others, and knows older versions of ApiVersions (v5: KIP-1242), DeleteGroups (v3) and
TxnOffsetCommit (v6: topic ids). Read from Kafka 4.4.0's message definitions and written in kqp's
own notation (:mod:`kqp.protocol.definitions`), never copied:

* ``MESSAGES``: the layouts kqp reads or rewrites: ShareFetch (records, ``MaxBytes``, node
  endpoints) and ShareAcknowledge (node endpoints) whole, the newer versions above as patches of
  kafka-python's schemas. Tests hold them to frames captured from a real Kafka 4.4.
* ``UNSCHEMED``: facts of the APIs kqp passes on their header alone (``Unschemed``), the group
  APIs of KIP-848, 932 and 1071 among them. None names a broker: a streams group's ``UserEndpoint``
  is a Kafka Streams instance's ``application.server``, which clients reach directly.
* ``NAMES``: the api keys kafka-python's ``ApiKey`` does not name yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from .definitions import Definition, array, extended, field, message, message_class, struct
from .kafka39 import Unschemed

__all__ = ["DEFINITIONS", "MESSAGES", "NAMES", "STREAMS_GROUP_TOPOLOGY_UPDATE", "UNREGISTER_CONTROLLER",
           "UNSCHEMED"]

STREAMS_GROUP_TOPOLOGY_UPDATE = 93   # StreamsGroupTopologyDescriptionUpdate
UNREGISTER_CONTROLLER = 94
NAMES: Mapping[int, str] = MappingProxyType({
    STREAMS_GROUP_TOPOLOGY_UPDATE: "StreamsGroupTopologyDescriptionUpdate",
    UNREGISTER_CONTROLLER: "UnregisterController",
})

# -- KIP-932: ShareFetch and ShareAcknowledge (v0 was 4.0's early access, no longer served) ---------

_NODE_ENDPOINTS = array(
    "NodeEndpoints", "NodeEndpoint",
    field("NodeId", "int32"), field("Host", "string"), field("Port", "int32"),
    field("Rack", "string", nullable="0+", default="null"))
_CURRENT_LEADER = struct("CurrentLeader", "LeaderIdAndEpoch", field("LeaderId", "int32"), field("LeaderEpoch", "int32"))
_ACKNOWLEDGEMENT_BATCHES = array(
    "AcknowledgementBatches", "AcknowledgementBatch",
    field("FirstOffset", "int64"), field("LastOffset", "int64"), field("AcknowledgeTypes", "[]int8"))
_SHARE_GROUP_AND_MEMBER = (
    field("GroupId", "string", nullable="0+", default="null"),
    field("MemberId", "string", nullable="0+"),
    field("ShareSessionEpoch", "int32"))
_TOP_ERROR = (field("ErrorCode", "int16"), field("ErrorMessage", "string", nullable="0+", default="null"))

SHARE_FETCH_REQUEST = message(
    "ShareFetchRequest", ApiKey.ShareFetch, "1-2", "0+",
    *_SHARE_GROUP_AND_MEMBER,
    field("MaxWaitMs", "int32"),
    field("MinBytes", "int32"),
    field("MaxBytes", "int32", default="0x7fffffff"),
    field("MaxRecords", "int32", "1+"),
    field("BatchSize", "int32", "1+"),
    field("ShareAcquireMode", "int8", "2+", default=0),
    field("IsRenewAck", "bool", "2+", default="false"),
    array("Topics", "FetchTopic",
          field("TopicId", "uuid"),
          array("Partitions", "FetchPartition",
                field("PartitionIndex", "int32"),
                field("PartitionMaxBytes", "int32", "0"),
                _ACKNOWLEDGEMENT_BATCHES)),
    array("ForgottenTopicsData", "ForgottenTopic", field("TopicId", "uuid"), field("Partitions", "[]int32")))

SHARE_FETCH_RESPONSE = message(
    "ShareFetchResponse", ApiKey.ShareFetch, "1-2", "0+",
    field("ThrottleTimeMs", "int32"),
    *_TOP_ERROR,
    field("AcquisitionLockTimeoutMs", "int32", "1+"),
    array("Responses", "ShareFetchableTopicResponse",
          field("TopicId", "uuid"),
          array("Partitions", "PartitionData",
                field("PartitionIndex", "int32"),
                *_TOP_ERROR,
                field("AcknowledgeErrorCode", "int16"),
                field("AcknowledgeErrorMessage", "string", nullable="0+", default="null"),
                _CURRENT_LEADER,
                field("Records", "records", nullable="0"),
                array("AcquiredRecords", "AcquiredRecords",
                      field("FirstOffset", "int64"), field("LastOffset", "int64"), field("DeliveryCount", "int16")))),
    _NODE_ENDPOINTS)

SHARE_ACKNOWLEDGE_REQUEST = message(
    "ShareAcknowledgeRequest", ApiKey.ShareAcknowledge, "1-2", "0+",
    *_SHARE_GROUP_AND_MEMBER,
    field("IsRenewAck", "bool", "2+", default="false"),
    array("Topics", "AcknowledgeTopic",
          field("TopicId", "uuid"),
          array("Partitions", "AcknowledgePartition", field("PartitionIndex", "int32"), _ACKNOWLEDGEMENT_BATCHES)))

SHARE_ACKNOWLEDGE_RESPONSE = message(
    "ShareAcknowledgeResponse", ApiKey.ShareAcknowledge, "1-2", "0+",
    field("ThrottleTimeMs", "int32"),
    *_TOP_ERROR,
    field("AcquisitionLockTimeoutMs", "int32", "2+"),
    array("Responses", "ShareAcknowledgeTopicResponse",
          field("TopicId", "uuid"),
          array("Partitions", "PartitionData", field("PartitionIndex", "int32"), *_TOP_ERROR, _CURRENT_LEADER)),
    _NODE_ENDPOINTS)


# -- newer versions of messages kafka-python knows ----------------------------------------------------

def _valid_to(newest: int) -> Callable[[Definition], None]:
    def patch(json: Definition) -> None:
        json["validVersions"] = f"{json['validVersions'].split('-')[0]}-{newest}"
    return patch


def _api_versions_request(json: Definition) -> None:
    # KIP-1242: the cluster and node the client means to reach; a broker that is not it answers
    # REBOOTSTRAP_REQUIRED.
    _valid_to(5)(json)
    json["fields"] += [field("ClusterId", "string", "5+", nullable="5+", default="null"),
                       field("NodeId", "int32", "5+", default=-1)]


def _delete_groups_response(json: Definition) -> None:
    _valid_to(3)(json)
    json["fields"][1]["fields"].append(field("ErrorMessage", "string", "3+", nullable="3+", default="null"))


def _topic_ids(newest: int) -> Callable[[Definition], None]:
    """TxnOffsetCommit v6: each topic named by its id (KIP-516) where v0-v5 name it."""
    def patch(json: Definition) -> None:
        _valid_to(newest)(json)
        topic_fields = next(f for f in json["fields"] if f["name"] == "Topics")["fields"]
        name = next(f for f in topic_fields if f["name"] == "Name")
        name["versions"] = f"0-{newest - 1}"
        topic_fields.insert(topic_fields.index(name) + 1, field("TopicId", "uuid", f"{newest}+"))
    return patch


MESSAGES: tuple[type, ...] = (
    *map(message_class, (SHARE_FETCH_REQUEST, SHARE_FETCH_RESPONSE,
                         SHARE_ACKNOWLEDGE_REQUEST, SHARE_ACKNOWLEDGE_RESPONSE)),
    extended(ApiVersionsRequest, _api_versions_request),
    extended(ApiVersionsResponse, _valid_to(5)),
    extended(DeleteGroupsRequest, _valid_to(3)),
    extended(DeleteGroupsResponse, _delete_groups_response),
    extended(TxnOffsetCommitRequest, _topic_ids(6)),
    extended(TxnOffsetCommitResponse, _topic_ids(6)),
)
#: Message name -> kqp's definition, where it replaces or adds to kafka-python's (for the walkers).
DEFINITIONS: Mapping[str, Definition] = MappingProxyType({cls.name: cls.json for cls in MESSAGES})

# -- APIs passed on their header alone ----------------------------------------------------------------

UNSCHEMED: Mapping[int, Unschemed] = MappingProxyType({
    # KIP-848's two: clients of the released protocol (librdkafka 2.16) never join a group through a
    # listener offering the early-access ConsumerGroupHeartbeat v0 alone.
    ApiKey.ConsumerGroupHeartbeat: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.ConsumerGroupDescribe: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.ShareGroupHeartbeat: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.ShareGroupDescribe: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.DescribeShareGroupOffsets: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.AlterShareGroupOffsets: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.DeleteShareGroupOffsets: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.StreamsGroupHeartbeat: Unschemed(1, 0, False, throttle_first=True),
    ApiKey.StreamsGroupDescribe: Unschemed(1, 0, False, throttle_first=True),
    STREAMS_GROUP_TOPOLOGY_UPDATE: Unschemed(0, 0, False, throttle_first=True),
    UNREGISTER_CONTROLLER: Unschemed(0, 0, False, throttle_first=True),
    ApiKey.AddRaftVoter: Unschemed(1, 0, False, throttle_first=True),
    # The share coordinator's own RPCs between brokers (no throttle_time_ms).
    ApiKey.WriteShareGroupState: Unschemed(1, 0, False),
    ApiKey.ReadShareGroupStateSummary: Unschemed(1, 0, False),
})
