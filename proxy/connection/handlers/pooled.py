"""What topic pools and adaptive pools read of a Produce or a Fetch (issues 21 and 22), for its handler.

None of this runs unless the pools say one of them may want the kind (`PoolBook.reads`: a topic pool
of its byte rate, or an adaptive pool watching it); then, per principal (cached in quotas/pools.py):

* A topic pool that takes the principal: the frame's records bytes per topic
  (`kqp.protocol.topic_bytes`), ids resolved to names through the topic cache where the version
  names topics by id (KIP-516); they go on the request's `Usage` as a `TopicUsage`, which `Charging`
  charges to the topic pools. A Produce naming an id the cache does not know is held for one topic
  lookup first (the cache learns ids from the Metadata answers clients get); a Fetch response's
  unknown id, or one still unknown after the lookup, is not charged.
* An adaptive pool that watches the principal's requests of the kind: its `InFlight` record gets a
  watching handler, the API's own with a response side that reports the answer to each pool
  (`report`): forward -> response latency (`InFlight.sent_at`) per broker (`Request.node`), the units
  it moved, the upstream's own `throttle_time_ms`, and a Produce's partitions answered
  REQUEST_TIMED_OUT. A Fetch is latency only when it returned records and the broker had more to
  give (`counts_as_latency`): otherwise it may have waited on `max_wait_ms`. One watching handler
  per (pools, broker) is kept (`Watchers`), so a watched request costs a dict lookup.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kqp.protocol.topic_bytes import TopicBytes
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.adaptive_pools import AdaptivePool

from ..exchange import Handler, Usage

__all__ = ["Watchers", "report", "topic_sizes"]

BOOTSTRAP_NODE = -1   # a connection through the bootstrap listener: its broker's id is not known
MAX_WATCHERS = 4096


def topic_sizes(reading: TopicBytes, topics: TopicMetadata) -> tuple[list[tuple[str, int]], bool]:
    """`(topic name, bytes)` of a walk's topics, and whether an id among them is unknown."""
    sizes: list[tuple[str, int]] = []
    unknown = False
    for topic, nbytes in reading.topics():
        if isinstance(topic, uuid.UUID):
            name = topics.name(topic)
            if name is None:
                unknown = True
                continue
            topic = name
        sizes.append((topic, nbytes))
    return sizes, unknown


def report(watching: tuple[AdaptivePool, ...], now: float, node: int, latency: float | None, usage: Usage | None,
           throttle_ms: int, timeouts: int = 0) -> None:
    """One request answered at `now` to each adaptive pool watching it (`usage`: what it moved)."""
    units = (0.0, 0.0, 0.0, 1.0) if usage is None else (usage.quota_bytes, usage.records, usage.batches, 1.0)
    for pool in watching:
        pool.observe(now, node, latency, units, throttle_ms)
        if timeouts:
            pool.timeouts(timeouts)


class Watchers:
    """The watching handlers of one API: one per (pools, broker), made by `make` on first use."""

    def __init__(self, make: Callable[[tuple[AdaptivePool, ...], int], Handler]) -> None:
        self._make = make
        self._made: dict[tuple[tuple[AdaptivePool, ...], int], Handler] = {}

    def get(self, watching: tuple[AdaptivePool, ...], node: int | None) -> Handler:
        key = (watching, BOOTSTRAP_NODE if node is None else node)
        found = self._made.get(key)
        if found is None:
            if len(self._made) >= MAX_WATCHERS:   # reloads leave old pools behind: bounded
                self._made.clear()
            found = self._made[key] = self._make(*key)
        return found
