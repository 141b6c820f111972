"""KIP-599 at the proxy: CreateTopics, DeleteTopics and CreatePartitions against
`controller_mutation_rate`, topic by topic, as a Kafka controller enforces it.

The connection core's mutation handler (`kqp.proxy.connection.handlers.mutations`) hands every
request of these APIs (and every Metadata request, whose answer feeds the topic cache and may report
auto-created topics) to `MutationGate.plan`, which returns a `MutationPlan`: what to forward, the
quota violations known now, an optional `rewrite` of the upstream's response, kqp's own answer when
nothing is forwarded, or that a topic lookup must run first. One gate serves every connection of a
process (the topic cache is shared). The gate is pure (the lookup's I/O is the runtime's); the core
stays the one place that decides what is sent and muted.

The rules, Kafka's:

* First what the broker itself refuses (`broker_checks`: the topic exists, is unknown, asks for
  an invalid partition count...): such a topic gets the broker's error and costs nothing, even
  while the bucket is negative; the quota is the controller's last step.
* Request versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, DeleteTopics v5+,
  CreatePartitions v3+) get the strict quota: the other topics, in request order, are admitted
  while the token bucket has tokens >= 0 (an admitted topic may drive it negative), the rest get
  error 89. When nothing gets 89 the request goes upstream untouched and the upstream answers
  everything, its own refusals included. Otherwise kqp forwards a request holding only the
  admitted topics and merges the upstream's answer with its own (the 89s and the refusals it
  decided) in the client's order. The response's throttle is the rejection's ``-K/R``; an
  admitted topic never throttles (StrictControllerMutationQuota).
* Older versions get the permissive quota: everything is forwarded, the request's cost is
  recorded, and the response is throttled (KIP-219 through the core's usual path).
* validate_only CreateTopics and CreatePartitions are charged like the real thing: the KRaft
  controller applies the quota before validate_only drops the result's records. (DeleteTopics has
  no validate_only.)
* What a topic costs: CreateTopics its partition count (``num_partitions: -1`` the controller's
  default, learned from earlier CreateTopics answers, else Kafka's default of 1, settled from the
  answer at v5+); DeleteTopics the partitions it has; CreatePartitions the ones it adds.
* Topics the upstream refuses anyway (a bad config value, a policy...) are refunded when its
  answer arrives: the broker records only the mutations it carries out.
* Topics a Metadata request auto-creates are charged to the requester permissively (the broker's
  AutoTopicCreationManager records them on a permissive quota, and the Metadata response is not
  throttled for them): a topic the request named, which did not exist, counts once it shows up
  with partitions.

The topic cache is trusted when it knows a topic. When it does not: a DeleteTopics or
CreatePartitions topic is looked up first (its cost depends on it); a CreateTopics topic is taken
to be new, unless that matters (some topic would get 89, or the permissive throttle is non-zero),
when it is looked up too, so that an existing topic gets 36 and not 89; a topic a Metadata request
may auto-create is looked up, to know whether it existed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
from kqp.quotas.manager import QuotaManager, Violation
from kqp.quotas.model import Principal, QuotaType
from kqp.quotas.throttle import throttle_ms

from .broker_checks import Verdict, verdict
from .topic_metadata import TopicMetadata, topic_id_of

__all__ = ["GATED_APIS", "MutationGate", "MutationPlan", "Rewrite"]

log = logging.getLogger("kqp.mutations")

GATED_APIS = frozenset({ApiKey.Metadata, ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions})
MUTATION = QuotaType.CONTROLLER_MUTATION_RATE
# Kafka's `num.partitions` default: what a CreateTopics topic asking for the controller's default
# is charged until a CreateTopics answer (v5+) has said what that default is.
DEFAULT_NUM_PARTITIONS = 1
# How long a topic a Metadata request may have auto-created is awaited: Kafka's broker sends the
# creation to the controller with its request.timeout.ms (30 s by default) and then forgets it
# (AutoTopicCreationManager).
AUTO_CREATE_SECONDS = 30.0
MAX_AUTO_CREATES = 1000     # awaited at once; the oldest give way
#: Applied to the upstream's whole response frame (with its body offset and the loop time) before
#: delivery; returns the whole frame to deliver (the same object when nothing changes).
Rewrite = Callable[[memoryview, int, float], "memoryview | bytes"]
_RESULTS_FIELD = {ApiKey.CreateTopics: "topics", ApiKey.DeleteTopics: "responses", ApiKey.CreatePartitions: "results"}


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
        # topic -> (who asked, until when): named by a Metadata request that allowed
        # auto-creation, not existing then; charged to the requester once it shows up.
        self._auto_created: dict[str, tuple[Principal, float]] = {}

    @property
    def _default_partitions(self) -> int:
        return self.topics.default_partitions or DEFAULT_NUM_PARTITIONS

    @property
    def active(self) -> bool:
        """Whether any entity has a mutation quota (else every gated request passes untouched)."""
        return MUTATION in self.quotas.settings.quota_types

    def plan(self, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
             looked_up: bool = False) -> MutationPlan:
        """Decide one request; ``looked_up`` says the topic lookup it asked for has run."""
        if not self.active:
            if hdr.api_key == ApiKey.Metadata and self.quotas.topic_pools:
                # A topic pool charges Produce v13 and Fetch v13+ by topic id: the cache learns the
                # names of the ids from the Metadata answers clients get (the ids they then use).
                return MutationPlan(frame, rewrite=self._metadata_hook(hdr.api_version))
            return MutationPlan(frame)
        self._charge_auto_created(now)
        api, version = hdr.api_key, hdr.api_version
        if api == ApiKey.Metadata:
            return self._metadata(principal, hdr, frame, now, looked_up)
        topics, validate_only = mutation_request(api, version, frame[hdr.body_offset:])
        if MUTATION not in self.quotas.limits(principal):
            # Not limited, but its effects still keep the topic cache right for those who are.
            return MutationPlan(frame, rewrite=self._settler(api, version, None, [(t, 0) for t in topics],
                                                             validate_only))
        verdicts = [verdict(api, topic, self.topics, looked_up, self._default_partitions) for topic in topics]
        strict = knows_throttling_error(api, version)
        if not looked_up and (any(v.cost is None for v in verdicts)
                              or (any(v.unsure for v in verdicts) and self._over_quota(principal, verdicts,
                                                                                       strict, now))):
            return MutationPlan(frame, needs_lookup=True)
        if strict:
            return self._strict(principal, hdr, frame, topics, verdicts, now, validate_only)
        costs = [_cost(v) for v in verdicts]
        violations = self.quotas.record_mutations(principal, sum(costs), now)
        return MutationPlan(frame, violations, rewrite=self._settler(
            api, version, principal, list(zip(topics, costs, strict=True)), validate_only))

    def _over_quota(self, principal: Principal, verdicts: Sequence[Verdict], strict: bool, now: float) -> bool:
        """Whether the request, as the verdicts cost it, would meet the quota: some topic rejected
        (strict; admitted while tokens >= 0, as `QuotaManager.admit_mutations`) or a throttle
        (permissive). Only then can a topic the cache did not know change the answer."""
        tokens = self.quotas.mutation_tokens(principal, now)
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
    def _strict(self, principal: Principal, hdr: RequestHeader, frame: memoryview, topics: list[TopicMutation],
                verdicts: list[Verdict], now: float, validate_only: bool) -> MutationPlan:
        api, version = hdr.api_key, hdr.api_version
        admitted: list[int] = []
        refused: dict[int, tuple[int, str | None]] = {}
        worst: Violation | None = None
        for index, v in enumerate(verdicts):
            if v.refusal is not None:
                refused[index] = (v.refusal.error_code, v.refusal.message)
                continue
            rejection = self.quotas.admit_mutations(principal, _cost(v), now)
            if rejection is None:
                admitted.append(index)
            elif worst is None or rejection.throttle_seconds > worst.throttle_seconds:
                worst = rejection
        if worst is None:
            # Nothing over quota: the upstream answers every topic, its own refusals included
            # (charged 0, and charged what they really cost should the cache have been wrong).
            forwarded = [(topic, _cost(v)) for topic, v in zip(topics, verdicts, strict=True)]
            return MutationPlan(frame, rewrite=self._settler(api, version, principal, forwarded, validate_only))
        log.debug("%s: %s v%d: %d of %d topics over controller_mutation_rate (%d refused first), throttle %.3fs",
                  principal, api, version, len(topics) - len(admitted) - len(refused), len(topics), len(refused),
                  worst.throttle_seconds)
        if not admitted:
            body = merge_mutation_response(api, version, None, topics, [],
                                           throttle_ms=throttle_ms(worst.throttle_seconds), errors=refused)
            head = encode_response_header(api, version, hdr.correlation_id)
            return MutationPlan(frame, [worst], answer=frame_of(head, body))
        split = split_mutation_request(api, version, frame[hdr.body_offset:], admitted)
        settle = self._settler(api, version, principal, [(topics[i], _cost(verdicts[i])) for i in admitted],
                               validate_only)

        def merge(response: memoryview, body_offset: int, now: float) -> bytes:
            settle(response, body_offset, now)
            # throttle_time_ms stays the upstream's here: the core raises it to the request's
            # combined throttle, as it does for every response.
            merged = merge_mutation_response(api, version, response[body_offset:], topics, admitted, errors=refused)
            return with_body(response, body_offset, merged)

        return MutationPlan(with_body(frame, hdr.body_offset, split), [worst], rewrite=merge)

    # -- Metadata: the topic cache, and auto-created topics -----------------------------------
    def _metadata(self, principal: Principal, hdr: RequestHeader, frame: memoryview, now: float,
                  looked_up: bool) -> MutationPlan:
        version = hdr.api_version
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
            for name in unknown:    # they did not: should one show up, this request created it
                self._await_auto_create(name, principal, now)
        return MutationPlan(frame, rewrite=self._metadata_hook(version))

    def _metadata_hook(self, version: int) -> Rewrite:
        def learn(response: memoryview, body_offset: int, now: float) -> memoryview:
            self.topics.learn_response(version, response[body_offset:])
            self._charge_auto_created(now)
            return response

        return learn

    def _await_auto_create(self, name: str, principal: Principal, now: float) -> None:
        if len(self._auto_created) >= MAX_AUTO_CREATES:
            del self._auto_created[next(iter(self._auto_created))]
        self._auto_created[name] = (principal, now + AUTO_CREATE_SECONDS)

    def _charge_auto_created(self, now: float) -> None:
        """Charge the awaited auto-creations the cache now knows (from a client's Metadata answer
        or kqp's own lookup), permissively, as the broker does; drop those awaited too long."""
        if not self._auto_created:
            return
        for name, (principal, until) in list(self._auto_created.items()):
            partitions = self.topics.partitions(name)
            if partitions is not None:
                del self._auto_created[name]
                if partitions:
                    log.debug("%s: topic %r auto-created with %d partitions", principal, name, partitions)
                    # The throttle is not applied to any response (KafkaApis throttles the
                    # Metadata response for request quotas only): the debt meets the next mutation.
                    self.quotas.record_mutations(principal, partitions, now)
            elif until <= now:
                del self._auto_created[name]

    # -- responses -----------------------------------------------------------------------------
    def _settler(self, api: int, version: int, principal: Principal | None,
                 forwarded: Sequence[tuple[TopicMutation, int]], validate_only: bool) -> Rewrite:
        """A pass-through rewrite that settles the charge and the topic cache from the answer."""

        def settle(response: memoryview, body_offset: int, now: float) -> memoryview:
            self._settle(api, version, principal, forwarded, validate_only, response[body_offset:], now)
            return response

        return settle

    def _settle(self, api: int, version: int, principal: Principal | None,
                forwarded: Sequence[tuple[TopicMutation, int]], validate_only: bool, body: memoryview,
                now: float) -> None:
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
            elif api == ApiKey.CreateTopics:
                reported = getattr(result, "num_partitions", None)   # v5+; -1 when not told
                if isinstance(reported, int) and reported > 0:
                    actual = reported
                    if topic.num_partitions == -1 and not topic.assignments:
                        self.topics.default_partitions = reported    # the controller's num.partitions
                else:
                    actual = topic.partitions if topic.partitions is not None else self._default_partitions
                correction += actual - cost   # the default estimated, or a topic the cache misjudged
                if not validate_only:
                    self._auto_created.pop(topic.key, None)   # created here, not by a Metadata request
                    self.topics.learn(topic.key, actual, topic_id_of(getattr(result, "topic_id", None)))
            elif validate_only:
                continue
            elif api == ApiKey.DeleteTopics:
                self.topics.forget(result.name, topic.topic_id)
            elif topic.target_count is not None:
                self.topics.learn(topic.key, topic.target_count)
        if principal is not None and correction:
            # Settles the bucket only: this request's throttle was decided when it came in.
            self.quotas.record_mutations(principal, correction, now)


def _cost(v: Verdict) -> int:
    assert v.cost is not None, "a topic whose cost needs the cache is looked up before it is charged"
    return v.cost
