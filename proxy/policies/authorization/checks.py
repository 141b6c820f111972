"""Every request authorized as a broker would, before kqp forwards it as its own upstream user.

`RequestAuthorization.check` decodes a request (kafka-python's classes, Kafka's schemas), asks its
API's rule (`authorization_rules.RULES`, KafkaApis' checks) what the principal may do, and answers
as a broker does: allowed, it goes as it came; refused whole (a group, a transactional id, the
cluster), kqp answers with the broker's error (GROUP_AUTHORIZATION_FAILED 30, ...) and nothing goes
upstream; refused in part (some topics), the rest goes and kqp puts the refused ones back into the
answer with TOPIC_AUTHORIZATION_FAILED (29), as the broker would have listed them; lists (Metadata,
ListGroups) come back showing only what the principal may describe, authorized-operations fields
computed for the principal, not for kqp's user. Each refusal is reported (`Denial`) for the metrics,
the log and `kqp explain`. A topic named by id is looked up in the topic cache first (`look_up`).
Pure: the ACLs in force are an `AclState` the runtime swaps whole on every change.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from kqp.protocol.apis import API_NAMES, ApiKey, decodable_range, message_classes
from kqp.protocol.headers import RequestHeader
from kqp.protocol.messages import decode_body, response_frame
from kqp.protocol.parts import Parts, joined
from kqp.protocol.produce import produce_transactional_id
from kqp.protocol.topic_bytes import produce_request_topics
from kqp.proxy.policies.authorization.fetch_sessions import FETCH_SESSION_ID_NOT_FOUND, FetchSessions
from kqp.proxy.policies.topic_metadata import TopicMetadata, topic_id_of
from kqp.quotas.acls.authorizer import Authorizer, Decision, narrows
from kqp.quotas.acls.bindings import CLUSTER_NAME, Operation, ResourceType

__all__ = ["ERRORS", "Access", "AclState", "Check", "Denial", "Mirror", "Outcome", "RequestAuthorization",
           "Verdict", "answer_or_forward", "answer_whole", "bits", "cluster", "mirrored", "rule"]

TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_ID = 53, 55, 100
#: Kafka's default messages for the errors kqp answers with (Errors.java), where a response has a message field.
_SESSION_NOT_FOUND = {"throttle_time_ms": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                      "responses": [], "node_endpoints": []}   # a broker's answer: no such session
ERRORS: Mapping[int, str] = {
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    OPERATION_NOT_ATTEMPTED: "The broker did not attempt to execute this operation. This may happen for batched "
                             "RPCs where some operations in the batch failed, causing the broker to respond "
                             "without trying the rest.",
    UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
}


class AclState:
    """The authorizer in force: swapped whole by the runtime (a reload, an ACL change: `put`), read per
    request. `generation` counts the changes that may have taken something from someone."""

    __slots__ = ("authorizer", "generation")

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer, self.generation = authorizer, 0

    def put(self, authorizer: Authorizer) -> None:
        if narrows(self.authorizer, authorizer):
            self.generation += 1
        self.authorizer = authorizer


class Denial(NamedTuple):
    """One refusal: who, from where, what on which resource, in which request, and the rule that decided."""

    principal: str
    host: str
    operation: Operation
    resource_type: ResourceType
    name: str
    api: int
    decision: Decision


class Access:
    """One request's questions to the authorizer: its principal and host, its denials reported."""

    __slots__ = ("api", "authorizer", "denials", "host", "principal", "topics")

    def __init__(self, authorizer: Authorizer, principal: str, host: str, api: int, topics: TopicMetadata) -> None:
        self.authorizer, self.principal, self.host, self.api = authorizer, principal, host, api
        self.topics = topics
        self.denials: list[Denial] = []   # reported once the request's outcome is final

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the principal may; a refusal of a resource it named is reported (Kafka's logIfDenied)."""
        if self.authorizer.authorize(self.principal, self.host, operation, resource_type, name):
            return True
        decision = self.authorizer.decide(self.principal, self.host, operation, resource_type, name)
        self.denials.append(Denial(self.principal, self.host, operation, resource_type, name, self.api, decision))
        return False

    def may(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the principal may, unreported: a list filtered to what it may see."""
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def cluster(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        return self.authorizer.authorized_operations(self.principal, self.host, resource_type, name)


def bits(field: int) -> set[int]:
    """An authorized-operations bit field as kafka-python holds one: the set of its bits."""
    return {bit for bit in range(32) if field >> bit & 1}


@dataclass(frozen=True)
class Mirror:
    """A request's list of named resources and how the response lists each: the broker answers every
    element of the request in a list of the response, with an error for the refused ones."""

    request: str                                # the request's list
    response: str                               # the response's list
    key: str | None = "name"                    # an element's name (None: the element is the name)
    response_key: str = "name"
    id_key: str | None = None                   # where versions name the topic by id instead
    parts: tuple[str, str | None, str, str] | None = None   # request sublist, its key (None: ints), response's
    error: str = "error_code"                   # on the element, or on each part when there are parts
    fields: Mapping[str, object] = field(default_factory=dict)   # the error element's other fields
    message: str | None = None                  # its message field, if the response has one


class Check(NamedTuple):
    """A whole-request check: `operation` on `resource_type`'s `name(request)` (None: not asked)."""

    operation: Operation
    resource_type: ResourceType
    name: Callable[[Any], str | None]
    error: int


class Outcome(NamedTuple):
    """What a rule decided of one decoded request."""

    answer: Any = None                          # kqp's whole answer (a response object); nothing goes
    request: Any = None                         # the request to forward instead (a request object)
    response: Callable[[Any], None] | None = None   # applied to the decoded upstream response
    close: str | None = None                    # close the connection (acks=0 Produce, an API kqp cannot authorize)
    look_up: bool = False                       # a topic id the cache does not know: look the topics up first


PASS = Outcome()
LOOK_UP = Outcome(look_up=True)
UNAUTHORIZABLE = Decision(False, "unauthorizable")
WRITE, TXN = Operation.WRITE, ResourceType.TRANSACTIONAL_ID
Rule = Callable[[Access, Any, int], Outcome]


class Verdict(NamedTuple):
    """`Outcome` in bytes, for the handler: a whole answer frame, a new request body, a response rewrite."""

    answer: bytes | None = None
    body: bytes | None = None
    rewrite: Callable[[memoryview, int], bytes] | None = None
    close: str | None = None
    look_up: bool = False
    watch: Callable[[Parts, int], None] | None = None   # reads the upstream's answer, as it came


ALLOWED = Verdict()


class RequestAuthorization:
    """One per process: the ACLs in force, the rules, the topic cache (ids to names), the denial sink."""

    def __init__(self, acls: AclState, rules: Mapping[int, Rule], topics: TopicMetadata,
                 denied: Callable[[Denial], None], served: frozenset[int] = frozenset()) -> None:
        self.acls, self.rules, self.topics, self.denied = acls, rules, topics, denied
        self.served = served   # APIs answered by kqp or needing no authorization: never asked here
        self.sessions = FetchSessions()

    def advertised(self, ranges: Mapping[int, tuple[int, int]]) -> Mapping[int, tuple[int, int]]:
        """What kqp advertises when it authorizes: an API it authorizes at the versions it decodes,
        none it cannot authorize (a client would send it only to be cut off)."""
        out = {}
        for api, (low, high) in ranges.items():
            if api not in self.served:
                versions = decodable_range(api) if api in self.rules else None
                if versions is None or max(low, versions[0]) > min(high, versions[1]):
                    continue
                low, high = max(low, versions[0]), min(high, versions[1])
            out[api] = (low, high)
        return out

    def check(self, hdr: RequestHeader, head: memoryview, frame: Parts, principal: str, host: str,
              looked_up: bool, node: int | None = None) -> Verdict:
        """What becomes of one request (`head`: a contiguous start of `frame`, the header at least;
        `node`: the broker it goes to, which keys its fetch session)."""
        authorizer, api, version = self.acls.authorizer, hdr.api_key, hdr.api_version
        if principal in authorizer.super_users:
            return ALLOWED
        rule = self.rules.get(api)
        versions = decodable_range(api)
        if rule is None or versions is None or not versions[0] <= version <= versions[1]:
            self.denied(Denial(principal, host, Operation.ALL, ResourceType.CLUSTER, CLUSTER_NAME, api, UNAUTHORIZABLE))
            return Verdict(close=f"{API_NAMES.get(api, api)} v{version}: kqp cannot authorize it, so super users "
                                 "alone may send it")
        if api == ApiKey.Produce and self._produce_allowed(principal, host, version, head, frame, hdr.body_offset):
            return ALLOWED   # read without decoding the records
        request_cls, response_cls = message_classes(api)
        request = decode_body(request_cls, version, joined(frame)[hdr.body_offset:])
        watch = None
        if api == ApiKey.Fetch and version >= 7:
            if not self.sessions.admits(node, principal, request, self.acls.generation):
                answer = encoded(_element(response_cls, version, _SESSION_NOT_FOUND), version)
                return Verdict(answer=response_frame(api, version, hdr.correlation_id, answer))
            if request.session_epoch == 0:   # it opens a session
                watch = self.sessions.watch(node, principal, version, self.acls.generation)
        verdict = self._verdict(api, version, hdr.correlation_id, looked_up, request, rule, principal, host)
        return verdict if watch is None else verdict._replace(watch=watch)

    def _verdict(self, api: int, version: int, correlation_id: int, looked_up: bool, request: Any, rule: Rule,
                 principal: str, host: str) -> Verdict:
        response_cls = message_classes(api)[1]
        access = (_Settled if looked_up else Access)(self.acls.authorizer, principal, host, api, self.topics)
        outcome = rule(access, request, version)
        if outcome.look_up:
            return Verdict(look_up=True)   # planned again once the lookup is done: its denials count then
        for denial in access.denials:
            self.denied(denial)
        if outcome.close is not None:
            return Verdict(close=outcome.close)
        if outcome.answer is not None:
            answer = encoded(outcome.answer, version)
            return Verdict(answer=response_frame(api, version, correlation_id, answer))
        if outcome.request is None and outcome.response is None:
            return ALLOWED
        forward = None if outcome.request is None else encoded(outcome.request, version)
        rewrite = None if outcome.response is None else _rewriter(version, response_cls, outcome.response)
        return Verdict(body=forward, rewrite=rewrite)

    def _produce_allowed(self, principal: str, host: str, version: int, head: memoryview, frame: Parts,
                         body_offset: int) -> bool:
        """A Produce the principal may send as it is, told from its transactional id and topic names
        alone (the schema walker's, never its records); False: decode it and answer as a broker would."""
        authorizer = self.acls.authorizer
        transactional_id = produce_transactional_id(version, head[body_offset:])
        if transactional_id is not None and not authorizer.authorize(principal, host, WRITE, TXN, transactional_id):
            return False
        for topic, _ in produce_request_topics(version, frame, body_offset).sizes.items():
            if version >= 13:
                name = self.topics.name(uuid.UUID(bytes=topic))
                if name is None:
                    return False
            else:
                name = topic.decode("utf-8", "replace")
            if not authorizer.authorize(principal, host, WRITE, ResourceType.TOPIC, name):
                return False
        return True


class _Settled(Access):
    """The questions after a topic lookup: an id the cache still does not know is unknown upstream too."""

    __slots__ = ()


def _rewriter(version: int, response_cls: type, change: Callable[[Any], None]) -> Callable[[memoryview, int], bytes]:
    def rewrite(frame: memoryview, body_offset: int) -> bytes:
        response = decode_body(response_cls, version, frame[body_offset:])
        change(response)
        head = bytes(frame[4:body_offset])
        body = encoded(response, version)
        return len(head + body).to_bytes(4, "big") + head + body

    return rewrite


def encoded(message: Any, version: int) -> bytes:
    """A kafka-python message's body at `version`, whether kqp made it or decoded it (a decoded one
    has no header slot set, which kafka-python's encode reads)."""
    try:
        message._header   # noqa: B018
    except AttributeError:
        message._header = None
    return bytes(message.encode(version=version))


def settled(access: Access) -> bool:
    """Whether the topic lookup has run for this request (an id still unknown is unknown)."""
    return isinstance(access, _Settled)


# -- lists of named resources ------------------------------------------------------------------


@cache
def _has(cls: type, name: str, version: int) -> bool:
    f = cls.fields.get(name)
    return f is not None and f.for_version_q(version)


def _element(cls: type, version: int, values: Mapping[str, object]) -> Any:
    return cls(version=version, **{k: v for k, v in values.items() if _has(cls, k, version)})


def name_of(mirror: Mirror, item: Any, version: int, access: Access) -> str | None:
    """An element's resource name; a topic named by an id the cache does not know is None."""
    if mirror.key is None:
        return item
    if mirror.id_key is not None and _has(type(item), mirror.id_key, version):
        topic_id = topic_id_of(getattr(item, mirror.id_key))
        if topic_id is not None:
            return access.topics.name(topic_id)
    return getattr(item, mirror.key) if _has(type(item), mirror.key, version) else None


def mirrored(mirror: Mirror, response_cls: type, version: int, items: Iterable[Any], error: int) -> list[Any]:
    """The response's elements answering `items` of the request with `error`, as the broker lists them."""
    element_cls = response_cls.fields[mirror.response].data_class
    out = []
    for item in items:
        values: dict[str, object] = {}
        if mirror.key is None:
            values[mirror.response_key] = item
        elif _has(type(item), mirror.key, version):   # the name, and the id where both are listed
            values[mirror.response_key] = getattr(item, mirror.key)
        if mirror.id_key is not None and _has(type(item), mirror.id_key, version):
            values[mirror.id_key] = getattr(item, mirror.id_key)
        failure = {**mirror.fields, mirror.error: error}
        if mirror.message is not None:
            failure[mirror.message] = ERRORS.get(error)
        if mirror.parts is None:
            values.update(failure)
        else:
            sub, sub_key, response_sub, response_sub_key = mirror.parts
            part_cls = element_cls.fields[response_sub].data_class
            values[response_sub] = [_element(part_cls, version, {response_sub_key: p if sub_key is None
                                                                 else getattr(p, sub_key), **failure})
                                    for p in getattr(item, sub) or ()]
        out.append(_element(element_cls, version, values))
    return out


def split(access: Access, mirror: Mirror, request: Any, version: int, operation: Operation,
          resource_type: ResourceType, error: int) -> tuple[list[tuple[Any, int]], bool]:
    """The request's elements the principal may not act on, each with its error, removed from the
    request; and whether an element names a topic id the cache does not know yet (look it up first)."""
    kept, refused, unknown = [], [], False
    for item in getattr(request, mirror.request) or ():
        name = name_of(mirror, item, version, access)
        if name is None:
            unknown = True
            refused.append((item, UNKNOWN_TOPIC_ID))
        elif access.allowed(operation, resource_type, name):
            kept.append(item)
        else:
            refused.append((item, error))
    if refused:
        setattr(request, mirror.request, kept)
    return refused, unknown and not settled(access)


def extend_with(mirror: Mirror, response_cls: type, version: int,
                refused: list[tuple[Any, int]]) -> Callable[[Any], None]:
    """A response rewrite: the refused elements appended to the response's list, each with its error."""
    def extend(response: Any) -> None:
        listed = getattr(response, mirror.response)
        for item, error in refused:
            listed.extend(mirrored(mirror, response_cls, version, [item], error))
    return extend


def answer_whole(api: int, version: int, request: Any, error: int, mirrors: Iterable[Mirror] = (),
                 **fields: object) -> Any:
    """kqp's answer refusing the whole request, as the broker's getErrorResponse builds it: the
    top-level error (and message) where the version has one, every listed element with the error."""
    response_cls = message_classes(api)[1]
    values: dict[str, object] = {"error_code": error, "error_message": ERRORS.get(error), **fields}
    response = _element(response_cls, version, values)
    for mirror in mirrors:
        if _has(response_cls, mirror.response, version):
            setattr(response, mirror.response,
                    mirrored(mirror, response_cls, version, getattr(request, mirror.request) or (), error))
    return response


# -- rules are made of these ------------------------------------------------------------------------

def cluster(operation: Operation) -> Check:
    """A whole-request check of `operation` on the cluster (CLUSTER_AUTHORIZATION_FAILED)."""
    return Check(operation, ResourceType.CLUSTER, lambda _request: CLUSTER_NAME, CLUSTER_AUTHORIZATION_FAILED)


def rule(api: int, checks: Sequence[Check] = (), mirror: Mirror | None = None,
         operation: Operation = Operation.READ, resource_type: ResourceType = ResourceType.TOPIC,
         error: int = TOPIC_AUTHORIZATION_FAILED) -> Rule:
    """A rule: the whole-request `checks` in order (the first refusal answers the request whole, every
    listed element with its error, as the broker's getErrorResponse), then `operation` on each resource
    `mirror` lists: the refused answered with `error` in the response's list, the rest forwarded."""
    response_cls = message_classes(api)[1]
    mirrors = () if mirror is None else (mirror,)

    def authorize(access: Access, request: Any, version: int) -> Outcome:
        for check in checks:
            name = check.name(request)
            if name is not None and not access.allowed(check.operation, check.resource_type, name):
                return Outcome(answer=answer_whole(api, version, request, check.error, mirrors))
        if mirror is None:
            return PASS
        refused, unknown = split(access, mirror, request, version, operation, resource_type, error)
        if unknown:
            return LOOK_UP
        if not refused:
            return PASS
        return answer_or_forward(api, version, request, mirror.request,
                                 extend_with(mirror, response_cls, version, refused))

    return authorize


def answer_or_forward(api: int, version: int, request: Any, listed: str, change: Callable[[Any], None]) -> Outcome:
    """The request with its refused elements removed goes upstream and `change` puts them back into the
    answer; with none left, kqp answers alone (`change` over an empty answer)."""
    if getattr(request, listed):
        return Outcome(request=request, response=change)
    answer = answer_whole(api, version, request, 0, ())
    change(answer)
    return Outcome(answer=answer)
