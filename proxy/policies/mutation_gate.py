"""KIP-599 at the proxy: CreateTopics, DeleteTopics and CreatePartitions against
`controller_mutation_rate`, topic by topic, as a Kafka controller enforces it; and the topic cache
that Metadata answers keep right.

The mutation handlers hand each request to `MutationGate.plan` with the rules of its API (a
`MutationKind`: the broker's own checks, how its answer settles the cache); it returns a
`MutationPlan`: what to forward, the charges (`MutationCharge` values: the gate reads the bucket,
`Charging` charges), a rewrite of the upstream's answer, kqp's own answer when nothing goes, or that
the topics must be looked up first. The broker's own refusals come first and cost nothing; versions
that know THROTTLING_QUOTA_EXCEEDED get the strict quota (topics admitted while tokens >= 0, the
rest 89, the rejection's `-K/R` throttles), older ones (and an observed quota) the permissive one;
validate_only is charged like the real thing; refusals in the upstream's answer are refunded; topics
a Metadata request auto-created are charged to the requester when they show up. quotas/README.md
("Topic mutations") has the details and Kafka's sources for each rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.headers import RequestHeader, encode_response_header
from kqp.protocol.mutations import (
    TopicMutation,
    knows_throttling_error,
    merge_mutation_response,
    metadata_auto_create,
    mutation_request,
    split_mutation_request,
)
from kqp.protocol.parts import frame_of, with_body
from kqp.protocol.records import BodyError
from kqp.quotas.charges import MutationCharge, MutationRule
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import MUTATION, Principal
from kqp.quotas.rates.throttle import throttle_ms

from . import broker_checks
from .broker_checks import Verdict
from .topic_metadata import TopicMetadata, topic_id_of

__all__ = ["CREATE_PARTITIONS", "CREATE_TOPICS", "DELETE_TOPICS", "GATED_APIS", "MutationGate", "MutationKind",
           "MutationPlan", "Rewrite"]

log = logging.getLogger("kqp.mutations")

#: The APIs the gate plans (their handlers are bound in the registry).
GATED_APIS = frozenset({ApiKey.Metadata, ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions})
PERMISSIVE, STRICT, REJECTED, SETTLE = MutationRule.PERMISSIVE, MutationRule.STRICT, MutationRule.REJECTED, \
    MutationRule.SETTLE
# Kafka's `num.partitions` default: what a CreateTopics topic asking for the controller's default
# is charged until a CreateTopics answer (v5+) has said what that default is.
DEFAULT_NUM_PARTITIONS = 1
# How long a topic a Metadata request may have auto-created is awaited: Kafka's broker sends the
# creation to the controller with its request.timeout.ms (30 s by default) and then forgets it
# (AutoTopicCreationManager).
AUTO_CREATE_SECONDS = 30.0
MAX_AUTO_CREATES = 1000     # awaited at once; the oldest give way
Charges = tuple[MutationCharge, ...]
#: Applied to the upstream's whole response frame (with its body offset and the loop time) before
#: delivery: the whole frame to deliver (the same object when nothing changes), and what its answer
#: settles (charges that never throttle this request).
Rewrite = Callable[[memoryview, int, float], "tuple[memoryview | bytes, Charges]"]
Check = Callable[[TopicMutation, TopicMetadata, bool, int], Verdict]


@dataclass(slots=True)
class MutationPlan:
    """What the core does with one gated request."""

    frame: memoryview | bytes                      # forward this (unless `answer` is set)
    charges: Charges = ()                          # for `Charging`, in order
    rewrite: Rewrite | None = None                 # applied to the upstream's response
    answer: bytes | None = None                    # kqp's own whole response frame: forward nothing
    needs_lookup: bool = False                     # look the topics up, then plan the same frame again


class MutationGate:
    """One per proxy process: the topic cache is shared by every connection. It reads the quotas
    (which apply, the bucket's tokens) and charges nothing: its plans name the charges."""

    def __init__(self, quotas: QuotaManager, topics: TopicMetadata) -> None:
        self.quotas = quotas
        self.topics = topics
        # topic -> (who asked, until when): named by a Metadata request that allowed
        # auto-creation, not existing then; charged to the requester once it shows up.
        self._auto_created: dict[str, tuple[Principal, float]] = {}
        self.learn_topics = False   # the cache learns from every Metadata answer (authorization reads ids too)

    @property
    def _default_partitions(self) -> int:
        return self.topics.default_partitions or DEFAULT_NUM_PARTITIONS

    @property
    def active(self) -> bool:
        """Whether any entity has a mutation quota (else every gated request passes untouched)."""
        return MUTATION in self.quotas.settings.quota_types

    def plan(self, kind: MutationKind, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
             looked_up: bool = False) -> MutationPlan:
        """Decide one request of `kind`'s API; ``looked_up`` says the topic lookup it asked for has run."""
        if not self.active:
            return MutationPlan(frame)
        version = hdr.api_version
        topics, validate_only = mutation_request(kind.api, version, frame[hdr.body_offset:])
        if MUTATION not in self.quotas.limits(principal):
            # Not limited, but its effects still keep the topic cache right for those who are.
            return MutationPlan(frame, self._due(now, settle=True), rewrite=self._settler(
                kind, version, None, [(t, 0) for t in topics], validate_only))
        verdicts = [kind.check(topic, self.topics, looked_up, self._default_partitions) for topic in topics]
        # An observed quota refuses no topic: it is charged and checked as the permissive quota is,
        # so that its throttle is counted, and the request goes whole.
        strict = knows_throttling_error(kind.api, version) and not self.quotas.observed(principal, MUTATION)
        due = self._due(now)
        if not looked_up and (any(v.cost is None for v in verdicts)
                              or (any(v.unsure for v in verdicts) and self._over_quota(principal, verdicts,
                                                                                       strict, now, due))):
            return MutationPlan(frame, needs_lookup=True)
        due = self._due(now, settle=True)
        if strict:
            return self._strict(kind, principal, hdr, frame, topics, verdicts, now, validate_only, due)
        costs = [_cost(v) for v in verdicts]
        return MutationPlan(frame, (*due, MutationCharge(principal, sum(costs), PERMISSIVE)), rewrite=self._settler(
            kind, version, principal, list(zip(topics, costs, strict=True)), validate_only))

    def _tokens(self, principal: Principal, now: float, due: Charges) -> float | None:
        """The bucket's tokens once the charges before this request's are made (none spent here)."""
        tokens = self.quotas.mutation_tokens(principal, now)
        if tokens is None:
            return None
        return tokens - sum(c.partitions for c in due if c.principal == principal)

    def _over_quota(self, principal: Principal, verdicts: Sequence[Verdict], strict: bool, now: float,
                    due: Charges) -> bool:
        """Whether the request, as the verdicts cost it, would meet the quota: some topic rejected
        (strict: admitted while tokens >= 0) or a throttle (permissive). Only then can a topic the
        cache did not know change the answer."""
        tokens = self._tokens(principal, now, due)
        if tokens is None:
            return False
        costs = [_cost(v) for v in verdicts if v.refusal is None]
        if not strict:
            return tokens - sum(costs) < 0
        for cost in costs:
            if tokens < 0:
                return True
            tokens -= cost
        return False

    # -- the strict quota ----------------------------------------------------------------------
    def _strict(self, kind: MutationKind, principal: Principal, hdr: RequestHeader, frame: memoryview,
                topics: list[TopicMutation], verdicts: list[Verdict], now: float, validate_only: bool,
                due: Charges) -> MutationPlan:
        api, version = kind.api, hdr.api_version
        admitted: list[int] = []
        refused: dict[int, tuple[int, str | None]] = {}
        tokens = self._tokens(principal, now, due)
        rejected = 0
        for index, v in enumerate(verdicts):
            if v.refusal is not None:
                refused[index] = (v.refusal.error_code, v.refusal.message)
            elif tokens is None or tokens >= 0:   # admitted, even if it drives the bucket negative
                admitted.append(index)
                if tokens is not None:
                    tokens -= _cost(v)
            else:
                rejected += 1
        spent = sum(_cost(verdicts[i]) for i in admitted)
        if not rejected:
            # Nothing over quota: the upstream answers every topic, its own refusals included
            # (charged 0, and charged what they really cost should the cache have been wrong).
            forwarded = [(topic, _cost(v)) for topic, v in zip(topics, verdicts, strict=True)]
            return MutationPlan(frame, (*due, MutationCharge(principal, spent, STRICT)),
                                rewrite=self._settler(kind, version, principal, forwarded, validate_only))
        charges = (*due, MutationCharge(principal, spent, REJECTED))
        assert tokens is not None
        log.debug("%s: %s v%d: %d of %d topics over controller_mutation_rate (%d refused first)",
                  principal, api, version, rejected, len(topics), len(refused))
        if not admitted:
            # Its throttle_time_ms is the rejection's -K/R, which `Charging` will find once the charges are made.
            seconds = self.quotas.mutation_debt_seconds(principal, tokens, now)
            body = merge_mutation_response(api, version, None, topics, [], throttle_ms=throttle_ms(seconds),
                                           errors=refused)
            head = encode_response_header(api, version, hdr.correlation_id)
            return MutationPlan(frame, charges, answer=frame_of(head, body))
        split = split_mutation_request(api, version, frame[hdr.body_offset:], admitted)
        settle = self._settler(kind, version, principal, [(topics[i], _cost(verdicts[i])) for i in admitted],
                               validate_only)

        def merge(response: memoryview, body_offset: int, now: float) -> tuple[bytes, Charges]:
            _, settled = settle(response, body_offset, now)
            # throttle_time_ms stays the upstream's here: the core raises it to the request's throttle.
            merged = merge_mutation_response(api, version, response[body_offset:], topics, admitted, errors=refused)
            return with_body(response, body_offset, merged), settled

        return MutationPlan(with_body(frame, hdr.body_offset, split), charges, rewrite=merge)

    # -- Metadata: the topic cache, and auto-created topics -----------------------------------
    def metadata(self, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
                 looked_up: bool) -> MutationPlan:
        """A Metadata request: its answer feeds the topic cache; a topic it may auto-create is charged
        to `principal` once it shows up (permissively: the Metadata response is not throttled for it)."""
        version = hdr.api_version
        if not self.active:
            # A topic pool charges Produce v13 and Fetch v13+ by topic id: the cache learns the
            # names of the ids from the Metadata answers clients get (the ids they then use).
            return MutationPlan(frame, rewrite=self._learner(version)) \
                if self.quotas.topic_pools or self.learn_topics else MutationPlan(frame)
        if MUTATION in self.quotas.limits(principal):
            try:
                named = metadata_auto_create(version, frame[hdr.body_offset:])
            except BodyError as exc:
                # Metadata is every client's lifeline: what kqp cannot read goes to the upstream
                # as it came (and is not charged), rather than closing the connection.
                log.debug("%s: Metadata v%d request not readable for auto-creation: %s", principal, version, exc)
                named = []
            unknown = [n for n in named if self.topics.partitions(n) is None and n not in self._auto_created]
            if unknown and not looked_up:
                return MutationPlan(frame, needs_lookup=True)    # did they exist? Only a lookup says
            due = self._due(now, settle=True)
            for name in unknown:    # they did not: should one show up, this request created it
                self._await_auto_create(name, principal, now)
            return MutationPlan(frame, due, rewrite=self._learner(version))
        return MutationPlan(frame, self._due(now, settle=True), rewrite=self._learner(version))

    def _learner(self, version: int) -> Rewrite:
        def learn(response: memoryview, body_offset: int, now: float) -> tuple[memoryview, Charges]:
            self.topics.learn_response(version, response[body_offset:])
            return response, self._due(now, settle=True)

        return learn

    def _await_auto_create(self, name: str, principal: Principal, now: float) -> None:
        if len(self._auto_created) >= MAX_AUTO_CREATES:
            del self._auto_created[next(iter(self._auto_created))]
        self._auto_created[name] = (principal, now + AUTO_CREATE_SECONDS)

    def _due(self, now: float, settle: bool = False) -> Charges:
        """The awaited auto-creations the cache now knows (from a client's Metadata answer or kqp's own
        lookup), as charges to their requesters; `settle`: they are charged now, so stop awaiting them
        (and drop those awaited too long)."""
        if not self._auto_created:
            return ()
        due: list[MutationCharge] = []
        for name, (principal, until) in list(self._auto_created.items()):
            partitions = self.topics.partitions(name)
            if partitions is not None:
                if settle:
                    del self._auto_created[name]
                if partitions:
                    log.debug("%s: topic %r auto-created with %d partitions", principal, name, partitions)
                    # Its throttle meets the requester's next mutation (KafkaApis throttles the
                    # Metadata response for request quotas only).
                    due.append(MutationCharge(principal, partitions, SETTLE))
            elif settle and until <= now:
                del self._auto_created[name]
        return tuple(due)

    # -- responses -----------------------------------------------------------------------------
    def _settler(self, kind: MutationKind, version: int, principal: Principal | None,
                 forwarded: Sequence[tuple[TopicMutation, int]], validate_only: bool) -> Rewrite:
        """A pass-through rewrite that settles the charge and the topic cache from the answer."""

        def settle(response: memoryview, body_offset: int, now: float) -> tuple[memoryview, Charges]:
            correction = self._settle(kind, version, forwarded, validate_only, response[body_offset:])
            if principal is None or not correction:
                return response, ()
            # Settles the bucket only: this request's throttle was decided when it came in.
            return response, (MutationCharge(principal, correction, SETTLE),)

        return settle

    def _settle(self, kind: MutationKind, version: int, forwarded: Sequence[tuple[TopicMutation, int]],
                validate_only: bool, body: memoryview) -> int:
        """What the answer says the forwarded topics really cost, less what was charged; the cache
        learns what was carried out."""
        try:
            response = message_classes(kind.api)[1].decode(bytes(body), version=version)
            results = list(getattr(response, kind.results) or ())
        except Exception as exc:  # kafka-python raises struct.error, IndexError, ...: the client still gets it
            log.warning("%s v%d response not readable for the mutation quota: %r", kind.api, version, exc)
            return 0
        by_name = {r.name: r for r in results if r.name is not None}
        by_id = {i: r for r in results if (i := topic_id_of(getattr(r, "topic_id", None))) is not None}
        correction = 0
        for topic, cost in forwarded:
            result = by_id.get(topic.topic_id) if topic.topic_id is not None else by_name.get(topic.key)
            if result is None:
                continue
            if result.error_code != 0:
                correction -= cost       # not carried out, so not charged
            else:
                correction += kind.carried_out(self, topic, result, cost, validate_only)
        return correction

    def _created(self, topic: TopicMutation, result: Any, cost: int, validate_only: bool) -> int:
        reported = getattr(result, "num_partitions", None)   # v5+; -1 when not told
        if isinstance(reported, int) and reported > 0:
            actual = reported
            if topic.num_partitions == -1 and not topic.assignments:
                self.topics.default_partitions = reported    # the controller's num.partitions
        else:
            actual = topic.partitions if topic.partitions is not None else self._default_partitions
        if not validate_only:
            self._auto_created.pop(topic.key, None)   # created here, not by a Metadata request
            self.topics.learn(topic.key, actual, topic_id_of(getattr(result, "topic_id", None)))
        return actual - cost   # the default estimated, or a topic the cache misjudged

    def _deleted(self, topic: TopicMutation, result: Any, cost: int, validate_only: bool) -> int:
        self.topics.forget(result.name, topic.topic_id)
        return 0

    def _partitions_created(self, topic: TopicMutation, result: Any, cost: int, validate_only: bool) -> int:
        if not validate_only and topic.target_count is not None:
            self.topics.learn(topic.key, topic.target_count)
        return 0


@dataclass(frozen=True, slots=True)
class MutationKind:
    """The rules of one mutation API, bound to its handler by the registry: the broker's own checks
    (`broker_checks`), where its answer lists the topics, and what a carried-out topic teaches the cache."""

    api: int
    results: str
    check: Check
    carried_out: Callable[[MutationGate, TopicMutation, Any, int, bool], int]


CREATE_TOPICS = MutationKind(ApiKey.CreateTopics, "topics", broker_checks.create_topic, MutationGate._created)
DELETE_TOPICS = MutationKind(ApiKey.DeleteTopics, "responses", broker_checks.delete_topic, MutationGate._deleted)
CREATE_PARTITIONS = MutationKind(ApiKey.CreatePartitions, "results", broker_checks.create_partitions,
                                 MutationGate._partitions_created)


def _cost(v: Verdict) -> int:
    assert v.cost is not None, "a topic whose cost needs the cache is looked up before it is charged"
    return v.cost
