"""What a Kafka controller refuses before it consults the mutation quota, topic by topic, in its order.

KIP-599's strict mode answers THROTTLING_QUOTA_EXCEEDED (89) only to a topic the controller would
otherwise carry out: the quota is the last step of ReplicationControlManager's createTopic,
deleteTopic and createPartitions. A topic that exists, an unknown one, an invalid partition count get
the broker's own error even while the bucket is negative, and spend no tokens ("create if not
exists" never sees 89). One check per API (`create_topic`, `delete_topic`, `create_partitions`, bound
to its handler by the registry), each in Kafka's order with Kafka's messages, decided from the
request and the topic cache. What kqp cannot decide (authorisation, config values, replica placement,
policies) is charged and refunded when the upstream refuses it. A CreateTopics topic the cache does
not know is taken to be new (`unsure`: looked up when that matters); a DeleteTopics or
CreatePartitions topic must be looked up first, since its cost is the partitions it has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kqp.protocol.mutations import TopicMutation

from .topic_metadata import TopicMetadata

__all__ = ["Refusal", "Verdict", "create_partitions", "create_topic", "delete_topic"]

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100

# Kafka's Topic.validate: at most 249 characters, ASCII alphanumerics, '.', '_' and '-'.
_MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+", re.ASCII)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The broker's own error for one topic: it is answered with this, never with 89."""

    error_code: int
    message: str | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one topic of a mutation request comes to before the quota is asked."""

    cost: int | None               # partition mutations to charge; None: look the topic up first
    refusal: Refusal | None = None  # the broker refuses it (cost 0)
    unsure: bool = False           # decided on the cache's silence: a lookup could still refuse it


def _refused(code: int, message: str | None, unsure: bool = False) -> Verdict:
    return Verdict(0, Refusal(code, message), unsure)


# Each check: ``looked_up``: the cache has just been refreshed from the upstream, so what it does not
# know does not exist; ``default_partitions``: what ``num_partitions: -1`` gets.

def create_topic(topic: TopicMutation, topics: TopicMetadata, looked_up: bool, default_partitions: int) -> Verdict:
    name = topic.key
    if topics.partitions(name) is not None:
        return _refused(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    reason = _invalid_name(name)
    if reason is not None:
        return _refused(INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
    unsure = not looked_up      # it may exist (or collide) behind the cache's back
    colliding = topics.colliding(name)
    if colliding is not None:
        return _refused(INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {colliding}", unsure)
    if topic.null_configs:
        return _refused(INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(topic.null_configs),
                        unsure)
    if topic.assignments:
        if topic.replication_factor != -1:
            return _refused(INVALID_REQUEST, "A manual partition assignment was specified, but replication "
                            "factor was not set to -1.", unsure)
        if topic.num_partitions != -1:
            return _refused(INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions "
                            "was not set to -1.", unsure)
        return Verdict(topic.assignments, unsure=unsure)
    rf, count = topic.replication_factor, topic.num_partitions
    if rf is not None and (rf < -1 or rf == 0):
        return _refused(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the "
                        "default value.", unsure)
    if count is None or count < -1 or count == 0:
        return _refused(INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.", unsure)
    return Verdict(default_partitions if count == -1 else count, unsure=unsure)


def _invalid_name(name: str) -> str | None:
    if not name:
        return "the empty string is not allowed"
    if name in (".", ".."):
        return f"'{name}' is not allowed"
    if len(name) > _MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {_MAX_NAME_LENGTH}"
    if not _LEGAL_NAME.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def delete_topic(topic: TopicMutation, topics: TopicMetadata, looked_up: bool, default_partitions: int) -> Verdict:
    by_id = topic.topic_id is not None
    current = topics.partitions(None if by_id else topic.key, topic.topic_id)
    if current is not None:
        return Verdict(current)
    if not looked_up:
        return Verdict(None)
    if by_id:
        return _refused(UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
    return _refused(UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")


def create_partitions(topic: TopicMutation, topics: TopicMetadata, looked_up: bool,
                      default_partitions: int) -> Verdict:
    current = topics.partitions(topic.key)
    if current is None:
        # UnknownTopicOrPartitionException without a message: the answer carries none.
        return Verdict(None) if not looked_up else _refused(UNKNOWN_TOPIC_OR_PARTITION, None)
    count = topic.target_count if topic.target_count is not None else current
    if count == current:
        return _refused(INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        return _refused(INVALID_PARTITIONS, f"The topic {topic.key} currently has {current} partition(s); "
                        f"{count} would not be an increase.")
    added = count - current
    if topic.assignments is not None and topic.assignments != added:
        return _refused(INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {added} additional partition(s), but only "
                        f"{topic.assignments} assignment(s) were specified.")
    return Verdict(added)
