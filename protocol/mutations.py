"""KIP-599 topic mutations: read, split and answer CreateTopics, DeleteTopics, CreatePartitions.

An over-quota mutation is answered topic by topic: the broker rejects the topics that do not fit
with THROTTLING_QUOTA_EXCEEDED (89) and carries out the rest. kqp does the same in front of the
upstream: it reads the topics of a request, forwards a request holding only the admitted ones,
then merges the upstream's results with its own rejections in the client's topic order. These
requests are small and rare, so they are decoded and re-encoded whole with kafka-python's classes.

A `TopicMutation` carries the topic's cost as Kafka records it (partitions created, deleted or
added; ``None`` where the count comes from metadata kqp must look up) and the fields a controller
validates before it consults the quota. ``validate_only`` is charged, as the KRaft controller
charges it. `metadata_auto_create` reads which topics a Metadata request may auto-create.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataRequest

from .apis import ApiKey
from .records import BodyError

__all__ = [
    "THROTTLING_QUOTA_EXCEEDED",
    "TopicMutation",
    "knows_throttling_error",
    "merge_mutation_response",
    "metadata_auto_create",
    "mutation_request",
    "split_mutation_request",
]

THROTTLING_QUOTA_EXCEEDED = 89
# Kafka's Errors.THROTTLING_QUOTA_EXCEEDED message, which the broker puts in each rejected entry.
DEFAULT_MESSAGE = "The throttling quota has been exceeded."

_REQUESTS = {ApiKey.CreateTopics: CreateTopicsRequest, ApiKey.DeleteTopics: DeleteTopicsRequest,
             ApiKey.CreatePartitions: CreatePartitionsRequest}  # fmt: skip
_RESPONSES = {ApiKey.CreateTopics: CreateTopicsResponse, ApiKey.DeleteTopics: DeleteTopicsResponse,
              ApiKey.CreatePartitions: CreatePartitionsResponse}  # fmt: skip
# The first request version whose response may carry error 89 (KIP-599); older clients would
# not understand it, so the caller admits their topics and throttles instead.
_THROTTLING_ERROR_SINCE = {ApiKey.CreateTopics: 6, ApiKey.DeleteTopics: 5, ApiKey.CreatePartitions: 3}
# Where each response keeps its per-topic results.
_RESULTS_FIELD = {ApiKey.CreateTopics: "topics", ApiKey.DeleteTopics: "responses", ApiKey.CreatePartitions: "results"}


@dataclass(slots=True, frozen=True)
class TopicMutation:
    """One topic of a mutation request, in request order.

    ``key`` is the topic name, or the topic id as a string for a DeleteTopics v6+ entry that
    names its topic by id only (``topic_id`` is then set). ``partitions`` is the number of
    partition mutations the topic costs when the request alone tells it, None when it takes
    metadata or broker configuration (see the module docstring); ``target_count`` is the
    partition count a CreatePartitions entry asks for.

    The rest is what the broker validates before it charges anything: CreateTopics'
    ``num_partitions`` and ``replication_factor`` as sent (-1: the broker's default), the number
    of manual ``assignments`` (CreateTopics and CreatePartitions; None when there are none, or
    CreatePartitions sent null), and the names of configs sent with a null value.
    """

    key: str
    partitions: int | None
    topic_id: uuid.UUID | None = None
    target_count: int | None = None
    num_partitions: int | None = None
    replication_factor: int | None = None
    assignments: int | None = None
    null_configs: tuple[str, ...] = ()


def knows_throttling_error(api_key: int, api_version: int) -> bool:
    """Whether this request version may be answered with THROTTLING_QUOTA_EXCEEDED per topic."""
    return api_version >= _THROTTLING_ERROR_SINCE[_checked(api_key)]


def _checked(api_key: int) -> int:
    if api_key not in _REQUESTS:
        raise ValueError(f"api key {api_key} is not a topic mutation (CreateTopics, DeleteTopics or CreatePartitions)")
    return api_key


def _decode(cls: type, api_version: int, body: memoryview | bytes) -> object:
    if not 0 <= api_version <= cls.max_version:
        raise BodyError(f"{cls.__name__} has no version {api_version}")
    try:
        return cls.decode(bytes(body), version=api_version)
    except Exception as error:  # kafka-python raises struct.error, IndexError, Unicode errors...
        raise BodyError(f"malformed {cls.__name__} v{api_version}: {error}") from error


def _request_entries(api_key: int, api_version: int, request: object) -> list:
    entries = request.topic_names if api_key == ApiKey.DeleteTopics and api_version <= 5 else request.topics
    if entries is None:  # kafka-python decodes a null array it should have refused
        raise BodyError("null topic array in a topic mutation request")
    return entries


def _mutation(api_key: int, entry: object) -> TopicMutation:
    if entry is None or (api_key != ApiKey.DeleteTopics and entry.name is None):
        raise BodyError("null topic name in a topic mutation request")
    if api_key == ApiKey.CreateTopics:
        assignments = len(entry.assignments or ())
        count = entry.num_partitions
        # -1 is "the broker's default"; any other non-positive count is invalid and the broker
        # rejects it before recording anything.
        cost = assignments if assignments else (None if count == -1 else max(count, 0))
        nulls = tuple(config.name for config in entry.configs or () if config is not None and config.value is None)
        return TopicMutation(entry.name, cost, num_partitions=count, replication_factor=entry.replication_factor,
                             assignments=assignments or None, null_configs=nulls)
    if api_key == ApiKey.CreatePartitions:
        assignments = None if entry.assignments is None else len(entry.assignments)
        return TopicMutation(entry.name, None, target_count=entry.count, assignments=assignments)
    if isinstance(entry, str):  # DeleteTopics v0-5: a bare name
        return TopicMutation(entry, None)
    if entry.name is None:
        return TopicMutation(str(entry.topic_id), None, topic_id=entry.topic_id)
    return TopicMutation(entry.name, None)


def mutation_request(
    api_key: int, api_version: int, body: memoryview | bytes
) -> tuple[list[TopicMutation], bool]:
    """The request's topics in order, and its validate_only flag (False where it has none)."""
    request = _decode(_REQUESTS[_checked(api_key)], api_version, body)
    topics = [_mutation(api_key, entry) for entry in _request_entries(api_key, api_version, request)]
    return topics, bool(getattr(request, "validate_only", False))


def split_mutation_request(
    api_key: int, api_version: int, body: memoryview | bytes, admitted: Sequence[int]
) -> bytes:
    """A new request body holding only the topics at the ``admitted`` indexes, in request order."""
    request = _decode(_REQUESTS[_checked(api_key)], api_version, body)
    entries = _request_entries(api_key, api_version, request)
    for entry in entries:
        _mutation(api_key, entry)  # refuses what kafka-python decoded but could not encode back
    kept = [entries[index] for index in _indexes(admitted, len(entries))]
    field = "topic_names" if api_key == ApiKey.DeleteTopics and api_version <= 5 else "topics"
    return _encode(request, api_version, **{field: kept})


def _encode(message: object, version: int, **changes: object) -> bytes:
    # Encode a fresh copy: a message kafka-python decoded lacks the header slot its encode()
    # touches when given a version, and some classes (DeleteTopicsRequest) always pass one.
    cls = type(message)
    values = {name: getattr(message, name) for name, field in cls.fields.items() if field.for_version_q(version)}
    values.update(changes)
    return bytes(cls(version=version, **values).encode(version=version))


def _indexes(admitted: Sequence[int], size: int) -> list[int]:
    indexes = sorted(set(admitted))
    if indexes and not (0 <= indexes[0] and indexes[-1] < size):
        raise ValueError(f"admitted indexes {indexes} outside a request of {size} topics")
    return indexes


def merge_mutation_response(
    api_key: int,
    api_version: int,
    upstream_body: memoryview | bytes | None,
    all_topics: Sequence[TopicMutation],
    admitted: Sequence[int],
    error_code: int = THROTTLING_QUOTA_EXCEEDED,
    error_message: str | None = DEFAULT_MESSAGE,
    throttle_ms: int = 0,
    errors: Mapping[int, tuple[int, str | None]] | None = None,
) -> bytes:
    """One response body in the client's topic order: upstream results for the admitted topics,
    kqp-made entries for the rest, throttle_time_ms = max(upstream's, throttle_ms).

    A kqp-made entry carries ``errors[index]`` (error code, message) when given, else
    ``error_code`` and ``error_message``: the broker's own refusals that kqp decided itself
    travel with the THROTTLING_QUOTA_EXCEEDED ones.

    ``upstream_body`` is the upstream's answer to the split request, None when nothing was
    admitted and kqp answers alone. Upstream results are matched to admitted topics by name (by
    topic id for DeleteTopics entries given by id), not by position, since a broker need not
    answer in request order; an admitted topic the upstream left out stays out, and results
    the upstream added beyond the admitted topics are kept, at the end.
    """
    cls = _RESPONSES[_checked(api_key)]
    admitted_set = set(_indexes(admitted, len(all_topics)))
    field = _RESULTS_FIELD[api_key]
    if upstream_body is None:
        if admitted_set:
            raise ValueError("topics were admitted but there is no upstream response to merge")
        response = cls(version=api_version, throttle_time_ms=throttle_ms, **{field: []})
        upstream_results: list = []
        throttle = throttle_ms
    else:
        response = _decode(cls, api_version, upstream_body)
        upstream_results = list(getattr(response, field) or ())
        throttle = max(getattr(response, "throttle_time_ms", None) or 0, throttle_ms)
    merged = []
    for index, topic in enumerate(all_topics):
        if index in admitted_set:
            result = _take_result(upstream_results, topic)
            if result is not None:
                merged.append(result)
        else:
            code, message = (errors or {}).get(index, (error_code, error_message))
            merged.append(_rejected(api_key, cls, topic, code, message))
    merged.extend(upstream_results)
    return _encode(response, api_version, throttle_time_ms=throttle, **{field: merged})


def _take_result(results: list, topic: TopicMutation) -> object | None:
    for position, result in enumerate(results):
        if topic.topic_id is not None:
            if getattr(result, "topic_id", None) == topic.topic_id:
                return results.pop(position)
        elif result.name == topic.key:
            return results.pop(position)
    return None


def _rejected(api_key: int, cls: type, topic: TopicMutation, error_code: int, message: str | None) -> object:
    if api_key == ApiKey.CreateTopics:
        # As the broker fills a topic it did not create: no id, and -1 / empty for the v5+
        # num_partitions, replication_factor and configs.
        return cls.CreatableTopicResult(
            name=topic.key, topic_id=None, error_code=error_code, error_message=message,
            num_partitions=-1, replication_factor=-1, configs=[],
        )  # fmt: skip
    if api_key == ApiKey.DeleteTopics:
        name = None if topic.topic_id is not None else topic.key
        return cls.DeletableTopicResult(
            name=name, topic_id=topic.topic_id, error_code=error_code, error_message=message
        )
    return cls.CreatePartitionsTopicResult(name=topic.key, error_code=error_code, error_message=message)


def metadata_auto_create(api_version: int, body: memoryview | bytes) -> list[str]:
    """The topic names a Metadata request lets the broker create if they do not exist.

    Those it names, when it allows auto-creation: the flag from v4 on; before v4 always (the
    broker's ``auto.create.topics.enable`` alone decides). An all-topics request (null from v1,
    an empty list at v0) creates nothing, nor does an entry naming its topic by id only (v10+).
    """
    request = _decode(MetadataRequest, api_version, body)
    if not request.topics or (api_version >= 4 and not request.allow_auto_topic_creation):
        return []
    return [topic.name for topic in request.topics if topic is not None and topic.name]
