"""KIP-599 at the proxy: CreateTopics, DeleteTopics and CreatePartitions against
`controller_mutation_rate`, topic by topic, as a Kafka controller enforces it.

The connection core hands every request of these APIs (and every Metadata request, whose answer
feeds the topic cache) to `MutationGate.plan`, which returns a `MutationPlan`: what to forward, the
quota violations known now, an optional `rewrite` of the upstream's response, kqp's own answer when
nothing is forwarded, or that a topic lookup must run first. The gate is pure (the lookup's I/O is
the runtime's); the core stays the one place that decides what is sent and muted.

The rules, Kafka's:

* Request versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, DeleteTopics v5+,
  CreatePartitions v3+) get the strict quota: topics in request order are admitted while the
  token bucket has tokens >= 0 (an admitted topic may drive it negative), the rest are answered
  with error 89 by kqp. The admitted ones go upstream in a rewritten request, and the upstream's
  answer is merged back with kqp's rejections in the client's order. The response's throttle is
  the rejection's ``-K/R``; an admitted topic never throttles (StrictControllerMutationQuota).
* Older versions get the permissive quota: everything is forwarded, the whole request is
  recorded, and the response is throttled (KIP-219 through the core's usual path).
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
from collections.abc import Sequence
from dataclasses import dataclass, field

from kqp.protocol.apis import ApiKey, message_classes
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
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import Principal
from kqp.quotas.throttle import throttle_ms

from .in_flight import Rewrite
from .metering import frame_of, with_body
from .topic_metadata import TopicMetadata, topic_id_of

__all__ = ["GATED_APIS", "MutationGate", "MutationPlan"]

log = logging.getLogger("kqp.mutations")

METADATA = ApiKey.Metadata
GATED_APIS = frozenset({METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})
MUTATION = "controller_mutation_rate"
# Kafka's `num.partitions` default: what a CreateTopics topic asking for the broker's default is
# charged until the response (v5+) says how many partitions it got.
DEFAULT_NUM_PARTITIONS = 1
_RESULTS_FIELD = {CREATE_TOPICS: "topics", DELETE_TOPICS: "responses", CREATE_PARTITIONS: "results"}


@dataclass(slots=True)
class MutationPlan:
    """What the core does with one gated request."""

    frame: memoryview | bytes                      # forward this (unless `answer` is set)
    violations: list[Violation] = field(default_factory=list)
    rewrite: Rewrite | None = None                  # applied to the upstream's response
    answer: bytes | None = None                     # kqp's own whole response frame: forward nothing
    needs_lookup: bool = False                      # look the topics up, then plan the same frame again


class MutationGate:
    """One per proxy process: the topic cache is shared by every connection."""

    def __init__(self, quotas: QuotaManager, topics: TopicMetadata) -> None:
        self.quotas = quotas
        self.topics = topics

    @property
    def active(self) -> bool:
        """Whether any entity has a mutation quota (else every gated request passes untouched)."""
        return MUTATION in self.quotas.settings.quota_types

    def plan(self, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
             looked_up: bool = False) -> MutationPlan:
        """Decide one request; ``looked_up`` says the topic lookup it asked for has run."""
        if not self.active:
            return MutationPlan(frame)
        api, version = hdr.api_key, hdr.api_version
        if api == METADATA:
            return MutationPlan(frame, rewrite=self._metadata_hook(version))
        topics, validate_only = mutation_request(api, version, frame[hdr.body_offset:])
        if validate_only:
            return MutationPlan(frame)
        if MUTATION not in self.quotas.limits(principal):
            # Not limited, but its effects still keep the topic cache right for those who are.
            return MutationPlan(frame, rewrite=self._settler(api, version, None, [(t, 0) for t in topics]))
        costs = [self._cost(api, topic) for topic in topics]
        if None in costs and not looked_up:
            return MutationPlan(frame, needs_lookup=True)
        known = [0 if cost is None else cost for cost in costs]  # unknown after a lookup: no such topic
        if knows_throttling_error(api, version):
            return self._strict(principal, hdr, frame, topics, known, now)
        violations = self.quotas.record_mutations(principal, sum(known), now)
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

    # -- the strict quota ----------------------------------------------------------------------
    def _strict(self, principal: Principal, hdr: RequestHeader, frame: memoryview,
                topics: list[TopicMutation], costs: list[int], now: float) -> MutationPlan:
        api, version = hdr.api_key, hdr.api_version
        admitted: list[int] = []
        worst: Violation | None = None
        for index, cost in enumerate(costs):
            rejection = self.quotas.admit_mutations(principal, cost, now)
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
            body = merge_mutation_response(api, version, None, topics, [],
                                           throttle_ms=throttle_ms(worst.throttle_seconds))
            head = encode_response_header(api, version, hdr.correlation_id)
            return MutationPlan(frame, [worst], answer=frame_of(head, body))
        split = split_mutation_request(api, version, frame[hdr.body_offset:], admitted)
        settle = self._settler(api, version, principal, charged)

        def merge(response: memoryview, body_offset: int, now: float) -> bytes:
            settle(response, body_offset, now)
            # throttle_time_ms stays the upstream's here: the core raises it to the request's
            # combined throttle, as it does for every response.
            merged = merge_mutation_response(api, version, response[body_offset:], topics, admitted)
            return with_body(response, body_offset, merged)

        return MutationPlan(with_body(frame, hdr.body_offset, split), [worst], rewrite=merge)

    # -- responses -----------------------------------------------------------------------------
    def _metadata_hook(self, version: int) -> Rewrite:
        def learn(response: memoryview, body_offset: int, now: float) -> memoryview:
            self.topics.learn_response(version, response[body_offset:])
            return response

        return learn

    def _settler(self, api: int, version: int, principal: Principal | None,
                 forwarded: Sequence[tuple[TopicMutation, int]]) -> Rewrite:
        """A pass-through rewrite that settles the charge and the topic cache from the answer."""

        def settle(response: memoryview, body_offset: int, now: float) -> memoryview:
            self._settle(api, version, principal, forwarded, response[body_offset:], now)
            return response

        return settle

    def _settle(self, api: int, version: int, principal: Principal | None,
                forwarded: Sequence[tuple[TopicMutation, int]], body: memoryview, now: float) -> None:
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
            self.quotas.record_mutations(principal, correction, now)
