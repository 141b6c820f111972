"""Partition counts per topic, for the KIP-599 mutation quota: what a DeleteTopics or a
CreatePartitions costs depends on how many partitions the topic has now.

A broker reads that from its own metadata cache; kqp keeps a small one, fed cheapest first from the
Metadata answers clients already receive (decoded only while some entity has a
`controller_mutation_rate` or a topic pool names topics by id), the answers to the mutations kqp
forwards, and a Metadata request of kqp's own (`kqp.proxy.runtime.topic_lookup`) when a mutation
names a topic the cache does not know. Topics are known by name and, where the upstream reports ids
(Metadata v10+), by id too: DeleteTopics v6+ may name a topic by id only. It also keeps the partition
count the controller gives a topic asking for its default (`num_partitions: -1`), learned from
CreateTopics answers (v5+); until then Kafka's default `num.partitions` of 1 stands in. Pure: the
lookup's I/O lives in the runtime.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterable
from typing import Any

from kqp.protocol.apis import ApiKey, message_classes

log = logging.getLogger("kqp.mutations")

UNKNOWN_TOPIC_OR_PARTITION = 3
_DECODE_ERRORS = (struct.error, ValueError, IndexError, TypeError, EOFError, AssertionError, UnicodeDecodeError)


def topic_id_of(value: Any) -> uuid.UUID | None:
    """A real topic id, or None for kafka-python's null and Kafka's all-zero "no id"."""
    if isinstance(value, uuid.UUID) and value.int != 0:
        return value
    return None


class TopicMetadata:
    """topic name -> partition count, topic id -> name; a cache, never the truth."""

    def __init__(self) -> None:
        self._partitions: dict[str, int] = {}
        self._names: dict[uuid.UUID, str] = {}
        self.default_partitions: int | None = None   # the controller's num.partitions, once seen

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, name: str | None, topic_id: uuid.UUID | None = None) -> int | None:
        """The topic's partition count, by id when one is given, else by name; None if unknown."""
        if topic_id is not None:
            name = self._names.get(topic_id)
        if name is None:
            return None
        return self._partitions.get(name)

    def name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, if known (Produce v13 and Fetch v13+ name topics by id)."""
        return self._names.get(topic_id)

    def colliding(self, name: str) -> str | None:
        """A known topic whose name is ``name``'s once '.' and '_' are unified (Kafka's
        Topic.hasCollision: both end up in the same metric names), other than ``name`` itself."""
        if "." not in name and "_" not in name:
            return None
        unified = name.replace(".", "_")
        return next((known for known in self._partitions if known != name and known.replace(".", "_") == unified),
                    None)

    def __len__(self) -> int:
        return len(self._partitions)

    # -- learning ------------------------------------------------------------------------------
    def learn(self, name: str, partitions: int, topic_id: uuid.UUID | None = None) -> None:
        self._partitions[name] = partitions
        if topic_id is not None:
            self._names[topic_id] = name

    def forget(self, name: str | None, topic_id: uuid.UUID | None = None) -> None:
        if topic_id is not None:
            name = self._names.pop(topic_id, None) or name
        if name is not None:
            self._partitions.pop(name, None)
            for known_id in [i for i, n in self._names.items() if n == name]:
                del self._names[known_id]

    def learn_topics(self, topics: Iterable[Any], complete: bool = False) -> None:
        """Take in the topics of a decoded Metadata response.

        ``complete`` says the response lists every topic (kqp's own all-topics lookup), so a
        known topic missing from it has been deleted.
        """
        seen: set[str] = set()
        for topic in topics:
            name, topic_id = topic.name, topic_id_of(getattr(topic, "topic_id", None))
            if topic.error_code == 0 and name is not None:
                self.learn(name, len(topic.partitions or ()), topic_id)
                seen.add(name)
            elif topic.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                self.forget(name, topic_id)
            # Other errors (a leader election under way, an authorisation failure) say nothing
            # about the partition count: what the cache holds stays.
        if complete:
            for name in [n for n in self._partitions if n not in seen]:
                self.forget(name)

    def learn_response(self, version: int, body: memoryview | bytes) -> None:
        """Feed a Metadata response body a client is receiving; a body kqp cannot read is skipped
        (the client gets it unchanged either way, and a later lookup fills the gap)."""
        try:
            response = message_classes(ApiKey.Metadata)[1].decode(bytes(body), version=version)
        except _DECODE_ERRORS as exc:
            log.debug("metadata response v%d not readable for the topic cache: %r", version, exc)
            return
        self.learn_topics(response.topics or ())
