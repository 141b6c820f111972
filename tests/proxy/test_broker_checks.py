"""broker_checks: what a Kafka controller refuses before it asks the mutation quota, in its order.

Each case names the Kafka code it follows (ReplicationControlManager for CreateTopics and
CreatePartitions, ControllerApis for DeleteTopics' name and id resolution) and expects Kafka's
error code and message. A refused topic costs 0: the quota is the controller's last step.
"""

from __future__ import annotations

import uuid

import pytest

from kqp.protocol.apis import ApiKey
from kqp.protocol.mutations import TopicMutation
from kqp.proxy.policies.broker_checks import Refusal, Verdict, create_partitions, create_topic, delete_topic
from kqp.proxy.policies.topic_metadata import TopicMetadata

DEFAULT = 3     # the controller's num.partitions in these cases


CHECKS = {ApiKey.CreateTopics: create_topic, ApiKey.DeleteTopics: delete_topic,
          ApiKey.CreatePartitions: create_partitions}


def verdict(api: int, topic, topics, looked_up: bool, default_partitions: int = 1) -> Verdict:
    """The check the mutation handler of `api` runs (the registry binds one per API)."""
    return CHECKS[api](topic, topics, looked_up, default_partitions)


def new_topic(name: str = "fresh", count: int = 4, rf: int = 1, assignments: int | None = None,
              null_configs: tuple[str, ...] = ()) -> TopicMutation:
    cost = assignments or (None if count == -1 else max(count, 0))
    return TopicMutation(name, cost, num_partitions=count, replication_factor=rf, assignments=assignments,
                         null_configs=null_configs)


def cache() -> TopicMetadata:
    topics = TopicMetadata()
    topics.learn("orders", 6, uuid.UUID(int=6))
    topics.learn("metrics.eu", 2)
    return topics


LONG = "x" * 250
RF_MESSAGE = "Replication factor must be larger than 0, or -1 to use the default value."
CREATE_CASES = [
    # (what the request sends, what the controller answers) -- in createTopics/createTopic's order.
    (new_topic("orders"), Refusal(36, "Topic 'orders' already exists.")),
    # Existence outranks everything after it: createTopics marks existing topics last, over
    # any name error, and createTopic never runs for them.
    (new_topic("orders", count=0, rf=0), Refusal(36, "Topic 'orders' already exists.")),
    (new_topic(""), Refusal(17, "Topic name is invalid: the empty string is not allowed")),
    (new_topic(".."), Refusal(17, "Topic name is invalid: '..' is not allowed")),
    (new_topic(LONG), Refusal(17, f"Topic name is invalid: the length of '{LONG}' is longer than the max allowed "
                                  "length 249")),
    (new_topic("a/b", count=0), Refusal(17, "Topic name is invalid: 'a/b' contains one or more characters other "
                                            "than ASCII alphanumerics, '.', '_' and '-'")),
    # "metrics_eu" and "metrics.eu" share metric names: Topic.hasCollision.
    (new_topic("metrics_eu"), Refusal(17, "Topic 'metrics_eu' collides with existing topic: metrics.eu")),
    (new_topic(null_configs=("retention.ms", "cleanup.policy"), count=0),
     Refusal(40, "Null value not supported for topic configs: retention.ms,cleanup.policy")),
    (new_topic(count=-1, rf=1, assignments=2),
     Refusal(42, "A manual partition assignment was specified, but replication factor was not set to -1.")),
    (new_topic(count=2, rf=-1, assignments=2),
     Refusal(42, "A manual partition assignment was specified, but numPartitions was not set to -1.")),
    # The replication factor is checked before the partition count.
    (new_topic(count=0, rf=0), Refusal(38, RF_MESSAGE)),
    (new_topic(rf=-2), Refusal(38, RF_MESSAGE)),
    (new_topic(count=0), Refusal(37, "Number of partitions was set to an invalid non-positive value.")),
    (new_topic(count=-5), Refusal(37, "Number of partitions was set to an invalid non-positive value.")),
]


@pytest.mark.parametrize(("topic", "refusal"), CREATE_CASES)
def test_create_topics_refusals_in_kafka_order(topic: TopicMutation, refusal: Refusal) -> None:
    result = verdict(ApiKey.CreateTopics, topic, cache(), looked_up=True, default_partitions=DEFAULT)
    assert result == Verdict(0, refusal)


def test_create_topics_costs_what_the_topic_gets() -> None:
    topics = cache()
    # num_partitions, else the default for -1 (with replication factor -1 too), else one per assignment.
    assert verdict(ApiKey.CreateTopics, new_topic(count=4), topics, True, DEFAULT) == Verdict(4)
    assert verdict(ApiKey.CreateTopics, new_topic(count=-1, rf=-1), topics, True, DEFAULT) == Verdict(DEFAULT)
    assert verdict(ApiKey.CreateTopics, new_topic(count=-1, rf=-1, assignments=5), topics, True, DEFAULT) == Verdict(5)


def test_a_topic_the_cache_does_not_know_is_new_but_unsure_until_looked_up() -> None:
    topics = cache()
    # Not in the cache: probably new, charged as such, but it may exist behind kqp's back.
    assert verdict(ApiKey.CreateTopics, new_topic(), topics, False, DEFAULT) == Verdict(4, unsure=True)
    assert verdict(ApiKey.CreateTopics, new_topic(count=0), topics, False, DEFAULT).unsure
    # An invalid name cannot belong to an existing topic: sure either way.
    assert not verdict(ApiKey.CreateTopics, new_topic("a/b"), topics, False, DEFAULT).unsure
    # A topic the cache knows is sure without a lookup.
    assert verdict(ApiKey.CreateTopics, new_topic("orders"), topics, False, DEFAULT) == \
        Verdict(0, Refusal(36, "Topic 'orders' already exists."))


def test_delete_topics_resolves_names_and_ids_first() -> None:
    topics = cache()
    by_name, by_id = TopicMutation("orders", None), TopicMutation(str(uuid.UUID(int=6)), None, uuid.UUID(int=6))
    assert verdict(ApiKey.DeleteTopics, by_name, topics, False, DEFAULT) == Verdict(6)
    assert verdict(ApiKey.DeleteTopics, by_id, topics, False, DEFAULT) == Verdict(6)
    ghost, ghost_id = TopicMutation("ghost", None), TopicMutation("x", None, uuid.UUID(int=99))
    # Unknown: its cost is the partitions it has, so the cache must be asked first...
    assert verdict(ApiKey.DeleteTopics, ghost, topics, False, DEFAULT) == Verdict(None)
    # ...and after the lookup it does not exist (ControllerApis.deleteTopics: findTopicIds /
    # findTopicNames answer with these errors before the controller deletes anything).
    assert verdict(ApiKey.DeleteTopics, ghost, topics, True, DEFAULT) == \
        Verdict(0, Refusal(3, "This server does not host this topic-partition."))
    assert verdict(ApiKey.DeleteTopics, ghost_id, topics, True, DEFAULT) == \
        Verdict(0, Refusal(100, "This server does not host this topic ID."))


@pytest.mark.parametrize(("count", "assignments", "expected"), [
    (9, None, Verdict(3)),                       # 6 -> 9: 3 partitions added
    (9, 3, Verdict(3)),
    (6, None, Verdict(0, Refusal(37, "Topic already has 6 partition(s)."))),
    (4, None, Verdict(0, Refusal(37, "The topic orders currently has 6 partition(s); 4 would not be an increase."))),
    (9, 2, Verdict(0, Refusal(39, "Attempted to add 3 additional partition(s), but only 2 assignment(s) "
                                  "were specified."))),
])
def test_create_partitions_refusals(count: int, assignments: int | None, expected: Verdict) -> None:
    topic = TopicMutation("orders", None, target_count=count, assignments=assignments)
    assert verdict(ApiKey.CreatePartitions, topic, cache(), False, DEFAULT) == expected


def test_create_partitions_of_an_unknown_topic() -> None:
    topic = TopicMutation("ghost", None, target_count=3)
    assert verdict(ApiKey.CreatePartitions, topic, cache(), False, DEFAULT) == Verdict(None)
    # UnknownTopicOrPartitionException() carries no message, and ApiError keeps none.
    assert verdict(ApiKey.CreatePartitions, topic, cache(), True, DEFAULT) == Verdict(0, Refusal(3, None))
