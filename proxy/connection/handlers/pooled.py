"""What topic pools (and per-topic metrics) read of a Produce or a Fetch: its records bytes per topic.

Only for a principal a topic pool takes (`Pools.wants_topics`), or for everyone when the metrics
count bytes per topic (`metrics.topic_bytes`): the frame's records bytes per topic
(`kqp.protocol.topic_bytes`), ids resolved to names through the topic cache where the version names
topics by id (KIP-516). For a pool, a Produce naming an id the cache does not know is held for one
topic lookup first (the cache learns ids from the Metadata answers clients get); a Fetch response's
unknown id, or one still unknown after the lookup, is not charged. The metrics never hold a request:
they name an unknown id by the id.
"""

from __future__ import annotations

import uuid

from kqp.protocol.topic_bytes import TopicBytes
from kqp.proxy.policies.topic_metadata import TopicMetadata

__all__ = ["topic_sizes"]


def topic_sizes(reading: TopicBytes, topics: TopicMetadata, by_id: bool = False) -> tuple[list[tuple[str, int]], bool]:
    """`(topic name, bytes)` of a walk's topics, and whether an id among them is unknown (`by_id`:
    then named by the id, else left out)."""
    sizes: list[tuple[str, int]] = []
    unknown = False
    for topic, nbytes in reading.topics():
        if isinstance(topic, uuid.UUID):
            name = topics.name(topic)
            if name is None:
                unknown = True
                if not by_id:
                    continue
                name = str(topic)
            topic = name
        sizes.append((topic, nbytes))
    return sizes, unknown
