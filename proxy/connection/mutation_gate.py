"""KIP-599 at the proxy: CreateTopics, DeleteTopics and CreatePartitions against
`controller_mutation_rate`, topic by topic, as a Kafka controller enforces it.

A session hands every request of these APIs (and every Metadata request, whose answer feeds the
topic cache) to `MutationGate.plan`, which returns a `MutationPlan`: what to forward, the quota
violations known now, an optional `rewrite` of the upstream's response, kqp's own answer when
nothing is forwarded, or a metadata lookup to await first. The session stays the one place that
writes to sockets and mutes.

The rules, Kafka's:

* Request versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, DeleteTopics v5+,
  CreatePartitions v3+) get the strict quota: topics in request order are admitted while the
  token bucket has tokens >= 0 (an admitted topic may drive it negative), the rest are answered
  with error 89 by kqp. The admitted ones go upstream in a rewritten request, and the upstream's
  answer is merged back with kqp's rejections in the client's order. The response's throttle is
  the rejection's ``-K/R``; an admitted topic never throttles (StrictControllerMutationQuota).
* Older versions get the permissive quota: everything is forwarded, the whole request is
  recorded, and the response is throttled (KIP-219 through the session's usual path).
* validate_only requests are forwarded and not counted.
* What a topic costs: CreateTopics its partition count (``num_partitions: -1``, the broker's
  default, counts as Kafka's default of 1 until the response reports the real count, v5+);
  DeleteTopics the partitions it has; CreatePartitions the ones it adds. The last two come from
  `TopicMetadata`; a topic still unknown after a lookup does not exist and costs 0.
* A topic the upstream refuses (it exists already, bad config...) is refunded when its answer
  arrives: the broker records only the mutations it carries out.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kqp.protocol.apis import message_classes
from kqp.protocol.headers import RequestHeader, encode_response_header
from kqp.protocol.mutations import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    TopicMutation,
    knows_throttling_error,
    merge_mutation_response,
    mutation_request,
    split_mutation_request,
)
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

from .topic_metadata import METADATA, TopicMetadata, topic_id_of

if TYPE_CHECKING:
    from kqp.proxy.runtime.context import ProxyContext

__all__ = ["GATED_APIS", "MutationGate", "MutationPlan", "Rewrite", "gate_for"]

log = logging.getLogger("kqp.mutations")

GATED_APIS = frozenset({METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})
MUTATION = "controller_mutation_rate"
# Kafka's `num.partitions` default: what a CreateTopics topic asking for the broker's default is
# charged until the response (v5+) says how many partitions it got.
DEFAULT_NUM_PARTITIONS = 1
_RESULTS_FIELD = {CREATE_TOPICS: "topics", DELETE_TOPICS: "responses", CREATE_PARTITIONS: "results"}
_SIZE = struct.Struct(">i")

#: Applied by the session to the upstream's whole response frame (and its body offset) before
#: delivery; returns the whole frame to deliver (the same object when nothing changes).
Rewrite = Callable[[memoryview, int], "memoryview | bytes"]


@dataclass(slots=True)
class MutationPlan:
    """What the session does with one gated request."""

    frame: memoryview | bytes                      # forward this (unless `answer` is set)
    violations: list[Violation] = field(default_factory=list)
    rewrite: Rewrite | None = None                  # applied to the upstream's response
    answer: bytes | None = None                     # kqp's own whole response frame: forward nothing
    lookup: Coroutine[Any, Any, None] | None = None  # await this, then plan the same frame again


def _frame(head: memoryview | bytes, body: bytes) -> bytes:
    return b"".join((_SIZE.pack(len(head) + len(body)), head, body))


class MutationGate:
    """One per proxy process: the topic cache is shared by every session."""

    def __init__(self, ctx: ProxyContext) -> None:
        self.ctx = ctx
        self.topics = TopicMetadata()

    @property
    def active(self) -> bool:
        """Whether any entity has a mutation quota (else every gated request passes untouched)."""
        return MUTATION in self.ctx.quotas.settings.quota_types

    def plan(self, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
             looked_up: bool = False) -> MutationPlan:
        """Decide one request; ``looked_up`` says the metadata lookup it asked for has run."""
        if not self.active:
            return MutationPlan(frame)
        api, version = hdr.api_key, hdr.api_version
        if api == METADATA:
            return MutationPlan(frame, rewrite=self._metadata_hook(version))
        topics, validate_only = mutation_request(api, version, frame[hdr.body_offset:])
        if validate_only:
            return MutationPlan(frame)
        if MUTATION not in self.ctx.quotas.limits(principal):
            # Not limited, but its effects still keep the topic cache right for those who are.
            return MutationPlan(frame, rewrite=self._settler(api, version, None, [(t, 0) for t in topics]))
        costs = [self._cost(api, topic) for topic in topics]
        if None in costs and not looked_up:
            lookup = self._lookup()
            if lookup is not None:
                return MutationPlan(frame, lookup=lookup)
        known = [0 if cost is None else cost for cost in costs]  # unknown after a lookup: no such topic
        if knows_throttling_error(api, version):
            return self._strict(principal, hdr, frame, topics, known, now)
        violations = self.ctx.quotas.record_mutations(principal, sum(known), now)
        return MutationPlan(frame, violations,
                            rewrite=self._settler(api, version, principal, list(zip(topics, known, strict=True))))

    # -- costs ---------------------------------------------------------------------------------
    def _cost(self, api: int, topic: TopicMutation) -> int | None:
        """Partition mutations the topic costs; None when the topic cache must be asked first."""
        if api == CREATE_TOPICS:
            return DEFAULT_NUM_PARTITIONS if topic.partitions is None else topic.partitions
        current = self.topics.partitions(None if topic.topic_id is not None else topic.key, topic.topic_id)
        if current is None:
            return None
        if api == DELETE_TOPICS:
            return current
        return max(0, (topic.target_count or 0) - current)

    def _lookup(self) -> Coroutine[Any, Any, None] | None:
        target = self.ctx.cluster.upstream_for(None)
        versions = self.ctx.cluster.api_ranges.get(METADATA)
        if target is None or versions is None:
            return None
        config = self.ctx.config
        return self.topics.lookup(target.host, target.port, versions[1],
                                  config.upstream.connect_timeout_ms / 1000, config.max_frame_bytes)

    # -- the strict quota ----------------------------------------------------------------------
    def _strict(self, principal: Principal, hdr: RequestHeader, frame: memoryview,
                topics: list[TopicMutation], costs: list[int], now: float) -> MutationPlan:
        api, version = hdr.api_key, hdr.api_version
        admitted: list[int] = []
        worst: Violation | None = None
        for index, cost in enumerate(costs):
            rejection = self.ctx.quotas.admit_mutations(principal, cost, now)
            if rejection is None:
                admitted.append(index)
            elif worst is None or rejection.throttle_seconds > worst.throttle_seconds:
                worst = rejection
        charged = [(topics[i], costs[i]) for i in admitted]
        if worst is None:
            return MutationPlan(frame, rewrite=self._settler(api, version, principal, charged))
        log.debug("%s: %s v%d: %d of %d topics over controller_mutation_rate, throttle %.3fs",
                  principal, api, version, len(topics) - len(admitted), len(topics), worst.throttle_seconds)
        if not admitted:
            throttle_ms = max(1, round(worst.throttle_seconds * 1000))
            body = merge_mutation_response(api, version, None, topics, [], throttle_ms=throttle_ms)
            head = encode_response_header(api, version, hdr.correlation_id)
            return MutationPlan(frame, [worst], answer=_frame(head, body))
        split = split_mutation_request(api, version, frame[hdr.body_offset:], admitted)
        settle = self._settler(api, version, principal, charged)

        def merge(response: memoryview, body_offset: int) -> bytes:
            settle(response, body_offset)
            # throttle_time_ms stays the upstream's here: the session raises it to the request's
            # combined throttle, as it does for every response.
            merged = merge_mutation_response(api, version, response[body_offset:], topics, admitted)
            return _frame(response[4:body_offset], merged)

        return MutationPlan(_frame(frame[4:hdr.body_offset], split), [worst], rewrite=merge)

    # -- responses -----------------------------------------------------------------------------
    def _metadata_hook(self, version: int) -> Rewrite:
        def learn(response: memoryview, body_offset: int) -> memoryview:
            self.topics.learn_response(version, response[body_offset:])
            return response

        return learn

    def _settler(self, api: int, version: int, principal: Principal | None,
                 forwarded: Sequence[tuple[TopicMutation, int]]) -> Rewrite:
        """A pass-through rewrite that settles the charge and the topic cache from the answer."""

        def settle(response: memoryview, body_offset: int) -> memoryview:
            self._settle(api, version, principal, forwarded, response[body_offset:])
            return response

        return settle

    def _settle(self, api: int, version: int, principal: Principal | None,
                forwarded: Sequence[tuple[TopicMutation, int]], body: memoryview) -> None:
        try:
            response = message_classes(api)[1].decode(bytes(body), version=version)
            results = list(getattr(response, _RESULTS_FIELD[api]) or ())
        except Exception as exc:  # kafka-python raises struct.error, IndexError, ...: the client still gets it
            log.warning("%s v%d response not readable for the mutation quota: %r", api, version, exc)
            return
        by_name = {r.name: r for r in results if r.name is not None}
        by_id = {i: r for r in results if (i := topic_id_of(getattr(r, "topic_id", None))) is not None}
        correction = 0
        for topic, cost in forwarded:
            result = by_id.get(topic.topic_id) if topic.topic_id is not None else by_name.get(topic.key)
            if result is None:
                continue
            if result.error_code != 0:
                correction -= cost       # not carried out, so not charged
            elif api == CREATE_TOPICS:
                reported = getattr(result, "num_partitions", None)
                actual = reported if isinstance(reported, int) and reported > 0 else cost
                if topic.partitions is None:
                    correction += actual - cost   # the broker's default was only estimated
                self.topics.learn(topic.key, actual, topic_id_of(getattr(result, "topic_id", None)))
            elif api == DELETE_TOPICS:
                self.topics.forget(result.name, topic.topic_id)
            elif topic.target_count is not None:
                self.topics.learn(topic.key, topic.target_count)
        if principal is not None and correction:
            # Settles the bucket only: this request's throttle was decided when it came in.
            self.ctx.quotas.record_mutations(principal, correction, self.ctx.now())


def gate_for(ctx: ProxyContext) -> MutationGate:
    """The process's one gate, kept on its context so every session shares one topic cache."""
    if ctx.mutation_gate is None:
        ctx.mutation_gate = MutationGate(ctx)
    return ctx.mutation_gate
