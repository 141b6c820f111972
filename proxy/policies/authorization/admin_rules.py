"""Which operation each admin API needs, and what the broker answers when it is refused.

The rules of the APIs that manage topics, configs and the cluster, read from KafkaApis and
ConfigHelper as `authorization/rules.py`'s are (which holds the clients' APIs and assembles `RULES`):
CreateTopics (CREATE on the cluster or each topic; configs shown only with DESCRIBE_CONFIGS),
DeleteTopics, the three config APIs (each resource's own ACL: a topic's 29, a group's 30, a
broker's or client metrics' the cluster's 31), DescribeCluster and DescribeTopicPartitions
(authorized operations the principal's), log dirs, client quotas and SCRAM credentials when kqp
does not answer them itself.
"""

from __future__ import annotations

from typing import Any

from kqp.protocol.apis import ApiKey, message_classes
from kqp.proxy.policies.authorization.checks import (
    CLUSTER_AUTHORIZATION_FAILED,
    ERRORS,
    GROUP_AUTHORIZATION_FAILED,
    PASS,
    TOPIC_AUTHORIZATION_FAILED,
    Access,
    Mirror,
    Outcome,
    Rule,
    answer_or_forward,
    answer_whole,
    bits,
    cluster,
    mirrored,
    rule,
    split,
)
from kqp.quotas.acls.bindings import CLUSTER_NAME, Operation, ResourceType

__all__ = ["ADMIN_RULES"]

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
CREATE, DELETE, ALTER, DESCRIBE = Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE
DESCRIBE_CONFIGS, ALTER_CONFIGS = Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS
# Config resource types: TOPIC 2, BROKER 4, BROKER_LOGGER 8, CLIENT_METRICS 16 (the cluster's ACL), GROUP 32.
_CONFIG_RESOURCE = {2: (TOPIC, TOPIC_AUTHORIZATION_FAILED), 32: (GROUP, GROUP_AUTHORIZATION_FAILED)}


CREATE_TOPICS = Mirror("topics", "topics", message="error_message",
                       fields={"num_partitions": -1, "replication_factor": -1, "configs": []})


def create_topics(access: Access, request: Any, version: int) -> Outcome:
    """CREATE on the cluster, else on each topic (29, "Authorization failed."); a topic's configs are
    shown only with DESCRIBE_CONFIGS on it (else topic_config_error_code 29, no configs)."""
    response_cls = message_classes(ApiKey.CreateTopics)[1]
    whole = access.may(CREATE, CLUSTER, CLUSTER_NAME)
    refused = [] if whole else [t for t in request.topics if not access.allowed(CREATE, TOPIC, t.name)]
    hidden = {t.name for t in request.topics if not access.may(DESCRIBE_CONFIGS, TOPIC, t.name)} \
        if version >= 5 else set()
    if not refused and not hidden:
        return PASS
    request.topics = [t for t in request.topics if t not in refused]

    def change(response: Any) -> None:
        for element in mirrored(CREATE_TOPICS, response_cls, version, refused, TOPIC_AUTHORIZATION_FAILED):
            element.error_message = "Authorization failed."
            response.topics.append(element)
        for topic in response.topics:
            if topic.name in hidden:
                topic.configs, topic.topic_config_error_code = [], TOPIC_AUTHORIZATION_FAILED
                topic.tags = {*(topic.tags or ()), "topic_config_error_code"}

    outcome = answer_or_forward(ApiKey.CreateTopics, version, request, "topics", change)
    return outcome if refused else outcome._replace(request=None)


DELETE_TOPICS_BY_NAME = Mirror("topic_names", "responses", key=None, message="error_message")
DELETE_TOPICS = Mirror("topics", "responses", id_key="topic_id", message="error_message")


def delete_topics(access: Access, request: Any, version: int) -> Outcome:
    mirror = DELETE_TOPICS if version >= 6 else DELETE_TOPICS_BY_NAME
    return rule(ApiKey.DeleteTopics, (), mirror, DELETE)(access, request, version)


def configs(api: int, field: str, operation: Operation) -> Rule:
    response_cls = message_classes(api)[1]
    element_cls = response_cls.fields[field].data_class

    def authorize(access: Access, request: Any, version: int) -> Outcome:
        refused = []
        for resource in request.resources:
            kind, error = _CONFIG_RESOURCE.get(resource.resource_type, (CLUSTER, CLUSTER_AUTHORIZATION_FAILED))
            name = resource.resource_name if kind is not CLUSTER else CLUSTER_NAME
            if not access.allowed(operation, kind, name):
                refused.append((resource, error))
        if not refused:
            return PASS
        gone = {id(r) for r, _ in refused}
        request.resources = [r for r in request.resources if id(r) not in gone]
        errors = [element_cls(version=version, error_code=error, error_message=ERRORS[error],
                              resource_type=r.resource_type, resource_name=r.resource_name,
                              **({"configs": []} if field == "results" else {})) for r, error in refused]
        return answer_or_forward(api, version, request, "resources", lambda r: getattr(r, field).extend(errors))
    return authorize


def describe_cluster(access: Access, request: Any, version: int) -> Outcome:
    if not request.include_cluster_authorized_operations:
        return PASS

    def change(response: Any) -> None:
        response.authorized_operations = bits(access.operations(CLUSTER, CLUSTER_NAME)
                                              if access.may(DESCRIBE, CLUSTER, CLUSTER_NAME) else 0)
    return Outcome(response=change)


DESCRIBE_TOPIC_PARTITIONS = Mirror("topics", "topics", fields={"is_internal": False, "partitions": []})


def describe_topic_partitions(access: Access, request: Any, version: int) -> Outcome:
    """As Metadata: named topics the principal may not describe are 29, a listing shows only those it
    may; each topic's authorized operations are the principal's."""
    response_cls = message_classes(ApiKey.DescribeTopicPartitions)[1]
    listing = not request.topics
    refused, _ = split(access, DESCRIBE_TOPIC_PARTITIONS, request, version, DESCRIBE, TOPIC,
                       TOPIC_AUTHORIZATION_FAILED)

    def change(response: Any) -> None:
        if listing:
            response.topics = [t for t in response.topics if access.may(DESCRIBE, TOPIC, t.name)]
        for topic in response.topics:
            if topic.error_code == 0:
                topic.topic_authorized_operations = access.operations(TOPIC, topic.name)
        response.topics.extend(mirrored(DESCRIBE_TOPIC_PARTITIONS, response_cls, version, [t for t, _ in refused],
                                        TOPIC_AUTHORIZATION_FAILED))

    if listing or not refused:
        return Outcome(response=change)
    return answer_or_forward(ApiKey.DescribeTopicPartitions, version, request, "topics", change)


def describe_log_dirs(access: Access, request: Any, version: int) -> Outcome:
    if access.cluster(DESCRIBE):
        return PASS
    return Outcome(answer=answer_whole(ApiKey.DescribeLogDirs, version, request,
                                       CLUSTER_AUTHORIZATION_FAILED if version >= 3 else 0, results=[]))


def alter_replica_log_dirs(access: Access, request: Any, version: int) -> Outcome:
    if access.cluster(ALTER):
        return PASS
    response_cls = message_classes(ApiKey.AlterReplicaLogDirs)[1]
    mirror = Mirror("topics", "results", response_key="topic_name",
                    parts=("partitions", None, "partitions", "partition_index"))
    answer = answer_whole(ApiKey.AlterReplicaLogDirs, version, request, 0, ())
    answer.results = [e for d in request.dirs
                      for e in mirrored(mirror, response_cls, version, d.topics, CLUSTER_AUTHORIZATION_FAILED)]
    return Outcome(answer=answer)


def alter_client_quotas(access: Access, request: Any, version: int) -> Outcome:
    if access.cluster(ALTER_CONFIGS):
        return PASS
    entry = message_classes(ApiKey.AlterClientQuotas)[1].fields["entries"].data_class
    entity = entry.fields["entity"].data_class
    answer = answer_whole(ApiKey.AlterClientQuotas, version, request, 0, ())
    answer.entries = [entry(version=version, error_code=CLUSTER_AUTHORIZATION_FAILED,
                            error_message=ERRORS[CLUSTER_AUTHORIZATION_FAILED],
                            entity=[entity(version=version, entity_type=e.entity_type, entity_name=e.entity_name)
                                    for e in item.entity]) for item in request.entries]
    return Outcome(answer=answer)


def alter_scram_credentials(access: Access, request: Any, version: int) -> Outcome:
    if access.cluster(ALTER):
        return PASS
    result = message_classes(ApiKey.AlterUserScramCredentials)[1].fields["results"].data_class
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
    answer = answer_whole(ApiKey.AlterUserScramCredentials, version, request, 0, ())
    answer.results = [result(version=version, user=user, error_code=CLUSTER_AUTHORIZATION_FAILED,
                             error_message=ERRORS[CLUSTER_AUTHORIZATION_FAILED]) for user in users]
    return Outcome(answer=answer)


ADMIN_RULES: dict[int, Rule] = {
    ApiKey.CreateTopics: create_topics,
    ApiKey.DeleteTopics: delete_topics,
    ApiKey.DescribeConfigs: configs(ApiKey.DescribeConfigs, "results", DESCRIBE_CONFIGS),
    ApiKey.AlterConfigs: configs(ApiKey.AlterConfigs, "responses", ALTER_CONFIGS),
    ApiKey.IncrementalAlterConfigs: configs(ApiKey.IncrementalAlterConfigs, "responses", ALTER_CONFIGS),
    ApiKey.AlterReplicaLogDirs: alter_replica_log_dirs,
    ApiKey.DescribeLogDirs: describe_log_dirs,
    ApiKey.CreatePartitions: rule(ApiKey.CreatePartitions, (), Mirror("topics", "results", message="error_message"),
                                  ALTER),
    ApiKey.ElectLeaders: rule(ApiKey.ElectLeaders, (cluster(ALTER),), Mirror(
        "topic_partitions", "replica_election_results", key="topic", response_key="topic",
        parts=("partitions", None, "partition_result", "partition_id"), message="error_message")),
    ApiKey.AlterPartitionReassignments: rule(ApiKey.AlterPartitionReassignments, (cluster(ALTER),)),
    ApiKey.ListPartitionReassignments: rule(ApiKey.ListPartitionReassignments, (cluster(DESCRIBE),)),
    ApiKey.DescribeClientQuotas: rule(ApiKey.DescribeClientQuotas, (cluster(DESCRIBE_CONFIGS),)),
    ApiKey.AlterClientQuotas: alter_client_quotas,
    ApiKey.DescribeUserScramCredentials: rule(ApiKey.DescribeUserScramCredentials, (cluster(DESCRIBE),)),
    ApiKey.AlterUserScramCredentials: alter_scram_credentials,
    ApiKey.DescribeQuorum: rule(ApiKey.DescribeQuorum, (cluster(DESCRIBE),)),
    ApiKey.UpdateFeatures: rule(ApiKey.UpdateFeatures, (cluster(ALTER),)),
    ApiKey.DescribeCluster: describe_cluster,
    ApiKey.ListConfigResources: rule(ApiKey.ListConfigResources, (cluster(DESCRIBE_CONFIGS),)),
    ApiKey.DescribeTopicPartitions: describe_topic_partitions,
}
