"""Which operation on which resource each client API needs, and what the broker answers when refused.

One rule per API, read from Kafka's KafkaApis (`authHelper.authorize` calls and the errors each
handler sends): whole-request checks first, in the handler's order (OffsetCommit's group before its
topics), then the resources it lists, each refused one answered in the response's own list; lists
the principal may only partly see are filtered on the way back. `RULES` maps an api key to its rule
(the admin APIs' from `authorization/admin_rules.py`); an API without one (no schema kqp decodes, or brokers' own:
WriteTxnMarkers) is for super users alone. ApiVersions, SASL and telemetry need no authorization; the ACL APIs and (with
`admin.manage_quotas`) the quota APIs are answered by kqp's own admin policies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kqp.protocol.apis import ApiKey, message_classes
from kqp.proxy.policies.authorization.admin_rules import ADMIN_RULES
from kqp.proxy.policies.authorization.checks import (
    CLUSTER_AUTHORIZATION_FAILED,
    ERRORS,
    GROUP_AUTHORIZATION_FAILED,
    LOOK_UP,
    OPERATION_NOT_ATTEMPTED,
    PASS,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    Access,
    Check,
    Mirror,
    Outcome,
    Rule,
    answer_or_forward,
    answer_whole,
    bits,
    extend_with,
    mirrored,
    rule,
    settled,
    split,
)
from kqp.quotas.acls.bindings import CLUSTER_NAME, Operation, ResourceType

__all__ = ["RULES"]

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, \
    ResourceType.TRANSACTIONAL_ID
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, \
    Operation.ALTER, Operation.DESCRIBE
DESCRIBE_CONFIGS, ALTER_CONFIGS, CLUSTER_ACTION = Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, \
    Operation.CLUSTER_ACTION
UNKNOWN_TOPIC_OR_PARTITION = 3
NO_OFFSET = -1


def _group(request: Any) -> str:
    return request.group_id


def _txn(request: Any) -> str | None:
    return request.transactional_id


GROUP_READ = Check(READ, GROUP, _group, GROUP_AUTHORIZATION_FAILED)
TXN_WRITE = Check(WRITE, TXN, _txn, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _topics(request: str, response: str, parts: tuple[str, str | None, str, str] | None, *,
            id_key: str | None = None, **fields: object) -> Mirror:
    return Mirror(request, response, parts=parts, id_key=id_key, fields=fields)


# -- Produce and Fetch ----------------------------------------------------------------------------

PRODUCE_TOPICS = _topics("topic_data", "responses", ("partition_data", "index", "partition_responses", "index"),
                         id_key="topic_id", base_offset=NO_OFFSET, log_append_time_ms=NO_OFFSET,
                         log_start_offset=NO_OFFSET)


def _produce_refused(access: Access, request: Any, version: int) -> Outcome:
    if request.acks == 0:   # no answer to carry the errors: the broker closes the connection
        return Outcome(close=f"an acks=0 Produce naming topics {access.principal} may not write")
    return PASS


def produce(access: Access, request: Any, version: int) -> Outcome:
    outcome = PRODUCE(access, request, version)
    if (outcome.answer is not None or outcome.request is not None) and request.acks == 0:
        return _produce_refused(access, request, version)
    return outcome


PRODUCE = rule(ApiKey.Produce, [TXN_WRITE], PRODUCE_TOPICS, WRITE)

FETCH_TOPICS = Mirror("topics", "responses", "topic", "topic",
                      parts=("partitions", "partition", "partitions", "partition_index"), id_key="topic_id",
                      fields={"high_watermark": NO_OFFSET, "last_stable_offset": NO_OFFSET,
                              "log_start_offset": NO_OFFSET, "preferred_read_replica": -1,
                              "aborted_transactions": None, "records": b""})
_FETCH = ApiKey.Fetch
_FETCH_RESPONSE = message_classes(_FETCH)[1]


def fetch(access: Access, request: Any, version: int) -> Outcome:
    """A consumer needs READ on each topic; a follower (a replica id) CLUSTER_ACTION. The filtered
    request always goes upstream, even empty: its fetch session's epoch must advance there."""
    replica = request.replica_state.replica_id if version >= 15 and request.replica_state is not None \
        else request.replica_id if version < 15 else -1
    if replica >= 0 and not access.cluster(CLUSTER_ACTION):
        refused = [(t, TOPIC_AUTHORIZATION_FAILED) for t in request.topics]
    else:
        refused, unknown = split(access, FETCH_TOPICS, request, version, READ, TOPIC, TOPIC_AUTHORIZATION_FAILED)
        if unknown:
            return LOOK_UP
    if not refused:
        return PASS
    request.topics = [] if replica >= 0 else request.topics
    return Outcome(request=request, response=extend_with(FETCH_TOPICS, _FETCH_RESPONSE, version, refused))


# -- Metadata ----------------------------------------------------------------------------------------

METADATA_TOPICS = Mirror("topics", "topics", id_key="topic_id", fields={"is_internal": False, "partitions": []})
_METADATA_RESPONSE = message_classes(ApiKey.Metadata)[1]


def metadata(access: Access, request: Any, version: int) -> Outcome:
    """Topics named: those the principal may not describe are answered 29, and kqp's user creates none
    the principal may not create (Kafka answers those 29 too); all topics: the answer lists only those
    it may describe. Authorized operations are the principal's."""
    listing = request.topics is None or (version == 0 and not request.topics)
    refused: list[tuple[Any, int]] = []
    denied_create: set[str] = set()
    if not listing:
        refused, unknown = split(access, METADATA_TOPICS, request, version, DESCRIBE, TOPIC,
                                 TOPIC_AUTHORIZATION_FAILED)
        if unknown:
            return LOOK_UP
        creating = request.allow_auto_topic_creation if version >= 4 else True
        if creating and request.topics and not access.may(CREATE, CLUSTER, CLUSTER_NAME):
            denied_create = {t.name for t in request.topics if not access.may(CREATE, TOPIC, t.name)}
        if denied_create and version < 4:   # no flag to clear: topics that do not exist are not asked for
            missing = [t for t in request.topics
                       if t.name in denied_create and access.topics.partitions(t.name) is None]
            if missing and not settled(access):
                return LOOK_UP
            refused += [(t, TOPIC_AUTHORIZATION_FAILED) for t in missing]
            request.topics = [t for t in request.topics if t not in missing]
        elif denied_create:
            request.allow_auto_topic_creation = False   # the upstream would create them as kqp's own user
    operations = version >= 8 and request.include_topic_authorized_operations
    cluster_ops = 8 <= version <= 10 and request.include_cluster_authorized_operations
    if not (listing or refused or denied_create or operations or cluster_ops):
        return PASS

    emptied = not listing and not request.topics   # v0 reads an empty list as every topic: none of them

    def change(response: Any) -> None:
        if listing:
            response.topics = [t for t in response.topics if t.name is None or access.may(DESCRIBE, TOPIC, t.name)]
        elif emptied:
            response.topics = []
        response.topics.extend(mirrored(METADATA_TOPICS, _METADATA_RESPONSE, version, [t for t, _ in refused],
                                        TOPIC_AUTHORIZATION_FAILED))
        for topic in response.topics:
            if topic.error_code == UNKNOWN_TOPIC_OR_PARTITION and topic.name in denied_create:
                topic.error_code, topic.topic_id = TOPIC_AUTHORIZATION_FAILED, None
            elif operations and topic.error_code == 0 and topic.name is not None:
                topic.authorized_operations = bits(access.operations(TOPIC, topic.name))
        if cluster_ops:
            response.authorized_operations = bits(access.operations(CLUSTER, CLUSTER_NAME)
                                                  if access.may(DESCRIBE, CLUSTER, CLUSTER_NAME) else 0)

    if listing or not (refused or denied_create):
        return Outcome(response=change)
    return Outcome(request=request, response=change)   # even with no topic left: the brokers, the cluster


# -- groups ------------------------------------------------------------------------------------------

OFFSET_COMMIT_TOPICS = _topics("topics", "topics", ("partitions", "partition_index", "partitions", "partition_index"),
                               id_key="topic_id")
OFFSET_FETCH_TOPICS = _topics("topics", "topics", ("partition_indexes", None, "partitions", "partition_index"),
                              id_key="topic_id", committed_offset=NO_OFFSET, committed_leader_epoch=-1, metadata="")
_OFFSET_FETCH_RESPONSE = message_classes(ApiKey.OffsetFetch)[1]
_GROUP_RESPONSE = _OFFSET_FETCH_RESPONSE.fields["groups"].data_class


def offset_fetch(access: Access, request: Any, version: int) -> Outcome:
    """DESCRIBE on each group (30), DESCRIBE on each topic (29; all partitions: the answer lists only those)."""
    if version < 8:
        if not access.allowed(DESCRIBE, GROUP, request.group_id):
            return Outcome(answer=answer_whole(ApiKey.OffsetFetch, version, request, GROUP_AUTHORIZATION_FAILED,
                                               () if version >= 2 else (OFFSET_FETCH_TOPICS,)))
        return _offset_fetch_topics(access, request, version, lambda response: response)
    refused_groups = [g for g in request.groups if not access.allowed(DESCRIBE, GROUP, g.group_id)]
    changes = []
    for group in request.groups:
        if group in refused_groups:
            continue
        outcome = _offset_fetch_topics(access, group, version, _group_of(group.group_id))
        if outcome.look_up:
            return outcome
        if outcome.response is not None:
            changes.append(outcome.response)
    if not refused_groups and not changes:
        return PASS
    request.groups = [g for g in request.groups if g not in refused_groups]

    def change(response: Any) -> None:
        for one in changes:
            one(response)
        response.groups.extend(_GROUP_RESPONSE(version=version, group_id=g.group_id, topics=[],
                                               error_code=GROUP_AUTHORIZATION_FAILED) for g in refused_groups)

    return answer_or_forward(ApiKey.OffsetFetch, version, request, "groups", change)


def _group_of(group_id: str) -> Callable[[Any], Any]:
    def group(response: Any) -> Any:
        return next((g for g in response.groups if g.group_id == group_id), _GROUP_RESPONSE(version=8, topics=[]))
    return group


def _offset_fetch_topics(access: Access, holder: Any, version: int, within: Callable[[Any], Any]) -> Outcome:
    """One group's topics: named ones checked, all of them (null) filtered in the answer."""
    if holder.topics is None:
        return Outcome(response=lambda response: _only_describable(access, within(response)))
    refused, unknown = split(access, OFFSET_FETCH_TOPICS, holder, version, DESCRIBE, TOPIC, TOPIC_AUTHORIZATION_FAILED)
    if unknown:
        return LOOK_UP
    if not refused:
        return PASS
    element = _OFFSET_FETCH_RESPONSE if version < 8 else _GROUP_RESPONSE
    return Outcome(request=holder, response=lambda response: extend_with(
        OFFSET_FETCH_TOPICS, element, version, refused)(within(response)))


def _only_describable(access: Access, holder: Any) -> None:
    holder.topics = [t for t in holder.topics if t.name is None or access.may(DESCRIBE, TOPIC, t.name)]


def find_coordinator(access: Access, request: Any, version: int) -> Outcome:
    """DESCRIBE on the group (30) or the transactional id (53); share coordinators need CLUSTER_ACTION."""
    def refusal(key: str) -> int | None:
        if request.key_type == 0:
            return None if access.allowed(DESCRIBE, GROUP, key) else GROUP_AUTHORIZATION_FAILED
        if request.key_type == 1:
            return None if access.allowed(DESCRIBE, TXN, key) else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None if access.cluster(CLUSTER_ACTION) else CLUSTER_AUTHORIZATION_FAILED

    if version < 4:
        error = refusal(request.key)
        if error is None:
            return PASS
        return Outcome(answer=answer_whole(ApiKey.FindCoordinator, version, request, error, node_id=-1, host="",
                                           port=-1))
    refused = [(key, error) for key in request.coordinator_keys if (error := refusal(key)) is not None]
    if not refused:
        return PASS
    coordinator = message_classes(ApiKey.FindCoordinator)[1].fields["coordinators"].data_class
    errors = [coordinator(version=version, key=key, node_id=-1, host="", port=-1, error_code=error,
                          error_message=ERRORS[error]) for key, error in refused]
    request.coordinator_keys = [k for k in request.coordinator_keys if k not in {key for key, _ in refused}]
    if not request.coordinator_keys:
        return Outcome(answer=answer_whole(ApiKey.FindCoordinator, version, request, 0, (), coordinators=errors))
    return Outcome(request=request, response=lambda response: response.coordinators.extend(errors))


DESCRIBED_GROUPS = Mirror("groups", "groups", key=None, response_key="group_id", message="error_message",
                          fields={"group_state": "", "protocol_type": "", "protocol_data": "", "members": []})


def describe_groups(access: Access, request: Any, version: int) -> Outcome:
    """DESCRIBE on each group (30); the authorized operations of the others are the principal's."""
    with_operations = version >= 3 and request.include_authorized_operations
    response_cls = message_classes(ApiKey.DescribeGroups)[1]
    refused = [g for g in request.groups if not access.allowed(DESCRIBE, GROUP, g)]
    if not refused and not with_operations:
        return PASS
    request.groups = [g for g in request.groups if g not in refused]

    def change(response: Any) -> None:
        if with_operations:
            for group in response.groups:
                if group.error_code == 0:
                    group.authorized_operations = bits(access.operations(GROUP, group.group_id))
        response.groups.extend(mirrored(DESCRIBED_GROUPS, response_cls, version, refused, GROUP_AUTHORIZATION_FAILED))

    outcome = answer_or_forward(ApiKey.DescribeGroups, version, request, "groups", change)
    return outcome if refused else outcome._replace(request=None)


def list_groups(access: Access, request: Any, version: int) -> Outcome:
    """Every group with DESCRIBE on the cluster; else only the groups the principal may describe."""
    if access.may(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return PASS

    def change(response: Any) -> None:
        response.groups = [g for g in response.groups if access.may(DESCRIBE, GROUP, g.group_id)]
    return Outcome(response=change)


# -- transactions and idempotence --------------------------------------------------------------------


def init_producer_id(access: Access, request: Any, version: int) -> Outcome:
    """WRITE on the transactional id (53); an idempotent producer IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic (31)."""
    if request.transactional_id is not None:
        if access.allowed(WRITE, TXN, request.transactional_id):
            return PASS
        error = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif access.may(Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or \
            access.authorizer.authorize_by_resource_type(access.principal, access.host, WRITE, TOPIC):
        return PASS
    else:
        access.cluster(Operation.IDEMPOTENT_WRITE)   # reported
        error = CLUSTER_AUTHORIZATION_FAILED
    return Outcome(answer=answer_whole(ApiKey.InitProducerId, version, request, error, producer_id=-1,
                                       producer_epoch=-1))


TXN_PARTITIONS = Mirror("v3_and_below_topics", "results_by_topic_v3_and_below",
                        parts=("partitions", None, "results_by_partition", "partition_index"),
                        error="partition_error_code")
_ADD_PARTITIONS = ApiKey.AddPartitionsToTxn
_ADD_PARTITIONS_RESPONSE = message_classes(_ADD_PARTITIONS)[1]
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def add_partitions_to_txn(access: Access, request: Any, version: int) -> Outcome:
    """v4+ come from brokers (CLUSTER_ACTION); a client's: WRITE on its transactional id (53) and on
    each topic, any refused failing the whole transaction (29, the others OPERATION_NOT_ATTEMPTED)."""
    if version >= 4:
        if access.cluster(CLUSTER_ACTION):
            return PASS
        return Outcome(answer=answer_whole(_ADD_PARTITIONS, version, request, CLUSTER_AUTHORIZATION_FAILED))
    if not access.allowed(WRITE, TXN, request.v3_and_below_transactional_id):
        return Outcome(answer=answer_whole(_ADD_PARTITIONS, version, request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                           (TXN_PARTITIONS,)))
    topics = request.v3_and_below_topics
    refused = [t for t in topics if t.name not in _INTERNAL_TOPICS and not access.allowed(WRITE, TOPIC, t.name)]
    if not refused:
        return PASS
    answer = answer_whole(_ADD_PARTITIONS, version, request, 0, ())
    answer.results_by_topic_v3_and_below = [
        *mirrored(TXN_PARTITIONS, _ADD_PARTITIONS_RESPONSE, version, refused, TOPIC_AUTHORIZATION_FAILED),
        *mirrored(TXN_PARTITIONS, _ADD_PARTITIONS_RESPONSE, version, [t for t in topics if t not in refused],
                  OPERATION_NOT_ATTEMPTED)]
    return Outcome(answer=answer)


TXN_OFFSET_TOPICS = _topics("topics", "topics", ("partitions", "partition_index", "partitions", "partition_index"))


def describe_transactions(access: Access, request: Any, version: int) -> Outcome:
    state_cls = message_classes(ApiKey.DescribeTransactions)[1].fields["transaction_states"].data_class
    refused = [t for t in request.transactional_ids if not access.allowed(DESCRIBE, TXN, t)]
    request.transactional_ids = [t for t in request.transactional_ids if t not in refused]

    def change(response: Any) -> None:
        for state in response.transaction_states:   # only the topics the principal may describe
            state.topics = [t for t in state.topics if access.may(DESCRIBE, TOPIC, t.topic)]
        response.transaction_states.extend(state_cls(version=version, transactional_id=t, topics=[],
                                                     error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                                           for t in refused)

    outcome = answer_or_forward(ApiKey.DescribeTransactions, version, request, "transactional_ids", change)
    return outcome if refused else outcome._replace(request=None)


def list_transactions(access: Access, request: Any, version: int) -> Outcome:
    def change(response: Any) -> None:
        response.transaction_states = [t for t in response.transaction_states
                                       if access.may(DESCRIBE, TXN, t.transactional_id)]
    return Outcome(response=change)


def _whole(api: int, *checks: Check, mirror: Mirror | None = None, operation: Operation = READ) -> Rule:
    return rule(api, checks, mirror, operation)


PARTITIONS = ("partitions", "partition_index", "partitions", "partition_index")
RULES: dict[int, Rule] = {
    ApiKey.Produce: produce,
    ApiKey.Fetch: fetch,
    ApiKey.ListOffsets: _whole(ApiKey.ListOffsets, mirror=_topics("topics", "topics", PARTITIONS, timestamp=NO_OFFSET,
                                                                   offset=NO_OFFSET, leader_epoch=-1),
                               operation=DESCRIBE),
    ApiKey.Metadata: metadata,
    ApiKey.OffsetCommit: _whole(ApiKey.OffsetCommit, GROUP_READ, mirror=OFFSET_COMMIT_TOPICS),
    ApiKey.OffsetFetch: offset_fetch,
    ApiKey.FindCoordinator: find_coordinator,
    ApiKey.JoinGroup: _whole(ApiKey.JoinGroup, GROUP_READ),
    ApiKey.Heartbeat: _whole(ApiKey.Heartbeat, GROUP_READ),
    ApiKey.LeaveGroup: _whole(ApiKey.LeaveGroup, GROUP_READ),
    ApiKey.SyncGroup: _whole(ApiKey.SyncGroup, GROUP_READ),
    ApiKey.DescribeGroups: describe_groups,
    ApiKey.ListGroups: list_groups,
    ApiKey.DeleteRecords: _whole(ApiKey.DeleteRecords, mirror=_topics("topics", "topics", PARTITIONS,
                                                                       low_watermark=NO_OFFSET), operation=DELETE),
    ApiKey.InitProducerId: init_producer_id,
    ApiKey.OffsetForLeaderEpoch: _whole(ApiKey.OffsetForLeaderEpoch, mirror=Mirror(
        "topics", "topics", key="topic", response_key="topic", parts=("partitions", "partition", "partitions",
                                                                      "partition"),
        fields={"leader_epoch": -1, "end_offset": NO_OFFSET}), operation=DESCRIBE),
    ApiKey.AddPartitionsToTxn: add_partitions_to_txn,
    ApiKey.AddOffsetsToTxn: _whole(ApiKey.AddOffsetsToTxn, TXN_WRITE, GROUP_READ),
    ApiKey.EndTxn: _whole(ApiKey.EndTxn, TXN_WRITE),
    ApiKey.TxnOffsetCommit: _whole(ApiKey.TxnOffsetCommit, TXN_WRITE, GROUP_READ, mirror=TXN_OFFSET_TOPICS),
    ApiKey.DeleteGroups: rule(ApiKey.DeleteGroups, (), Mirror("groups_names", "results", key=None,
                                                              response_key="group_id"), DELETE, GROUP,
                              GROUP_AUTHORIZATION_FAILED),
    ApiKey.OffsetDelete: _whole(ApiKey.OffsetDelete, Check(DELETE, GROUP, _group, GROUP_AUTHORIZATION_FAILED),
                                mirror=_topics("topics", "topics", PARTITIONS)),
    ApiKey.DescribeProducers: _whole(ApiKey.DescribeProducers, mirror=_topics(
        "topics", "topics", ("partition_indexes", None, "partitions", "partition_index"), active_producers=[])),
    ApiKey.DescribeTransactions: describe_transactions,
    ApiKey.ListTransactions: list_transactions,
    **ADMIN_RULES,
}
