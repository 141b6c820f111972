"""Hypothesis fuzzing of every body reader: whatever the bytes, the only error is BodyError.

Two sources of input: arbitrary bytes, and valid bodies with bytes flipped, cut or appended,
which reach much deeper into the walk than noise does.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.apis import ApiKey
from kqp.protocol.fetch import (
    cap_fetch_max_bytes,
    empty_fetch_response,
    fetch_max_bytes,
    fetch_response_counts,
    fetch_response_counts_parts,
)
from kqp.protocol.mutations import (
    TopicMutation,
    merge_mutation_response,
    mutation_request,
    split_mutation_request,
)
from kqp.protocol.parts import SplitFrame
from kqp.protocol.produce import produce_acks, produce_request_counts, produce_request_counts_parts
from kqp.protocol.records import BodyError, RecordCounts

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _records(n: int) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 16)
    for i in range(n):
        builder.append(i, b"k", b"v" * i)
    builder.close()
    return bytes(builder.buffer())


def _produce(version: int) -> bytes:
    part = ProduceRequest.TopicProduceData.PartitionProduceData
    key = {"topic_id": None} if version >= 13 else {"name": "t"}
    topic = ProduceRequest.TopicProduceData(partition_data=[part(index=0, records=_records(3)),
                                                            part(index=1, records=_records(1))], **key)
    request = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=5, topic_data=[topic, topic])
    return bytes(request.encode(version=version))


def _fetch_response(version: int) -> bytes:
    data = FetchResponse.FetchableTopicResponse.PartitionData
    partition = data(partition_index=0, error_code=0, high_watermark=5, records=_records(2),
                     aborted_transactions=[data.AbortedTransaction(producer_id=1, first_offset=2)],
                     current_leader=data.LeaderIdAndEpoch(leader_id=1, leader_epoch=1))  # fmt: skip
    topic = FetchResponse.FetchableTopicResponse(partitions=[partition, partition], topic="t")
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=3, responses=[topic])
    return bytes(response.encode(version=version))


def _fetch_request(version: int) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=100)
    topic = FetchRequest.FetchTopic(topic="t", partitions=[part, part])
    request = FetchRequest(replica_id=-1, max_wait_ms=1, min_bytes=1, max_bytes=1 << 30, topics=[topic],
                           forgotten_topics_data=[], rack_id="r")  # fmt: skip
    return bytes(request.encode(version=version))


def _create_topics(version: int) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic(name="t", num_partitions=2, replication_factor=1, assignments=[],
                                               configs=[])  # fmt: skip
    return bytes(CreateTopicsRequest(topics=[topic, topic], timeout_ms=1, validate_only=False).encode(version=version))


def _delete_topics(version: int) -> bytes:
    if version <= 5:
        return bytes(DeleteTopicsRequest(topic_names=["a", "b"], timeout_ms=1).encode(version=version))
    state = DeleteTopicsRequest.DeleteTopicState(name="a", topic_id=None)
    return bytes(DeleteTopicsRequest(topics=[state, state], timeout_ms=1).encode(version=version))


def _split_every_other(api_key: int, version: int, body: memoryview) -> bytes:
    # Admitted indexes come from reading the same body, as the caller gets them.
    topics, _ = mutation_request(api_key, version, body)
    return split_mutation_request(api_key, version, body, range(0, len(topics), 2))


TOPICS = [TopicMutation(name, 1) for name in ("a", "b", "c")]
_HEAD = b"\x00\x00\x00\x00\x00\x00\x00\x07\x00"  # a size prefix (not checked) and a response header v1


def _in_parts(body: memoryview) -> tuple[tuple[memoryview, ...], int]:
    """A frame around ``body`` cut into parts of 7 bytes, as many reads would deliver it."""
    frame = memoryview(_HEAD + bytes(body))
    return tuple(frame[i : i + 7] for i in range(0, len(frame), 7)), len(_HEAD)


def _count_records(body: memoryview) -> RecordCounts:
    counts = RecordCounts()
    counts.add_from(body, 0, len(body))
    return counts


def _records_split(body: memoryview) -> RecordCounts:
    counts = RecordCounts()
    parts, offset = _in_parts(body)
    counts.add_from_parts(SplitFrame(parts), offset, offset + len(body))
    return counts


def _create_topics_response(version: int) -> bytes:
    result = CreateTopicsResponse.CreatableTopicResult
    results = [result(name=n, error_code=0, error_message=None, num_partitions=1, replication_factor=1, configs=[])
               for n in ("c", "a")]  # fmt: skip
    return bytes(CreateTopicsResponse(throttle_time_ms=1, topics=results).encode(version=version))


# (reader, version, a valid body for it)
READERS: list[tuple[str, Callable[[int, memoryview], object], int, bytes]] = []
for v in (2, 3, 8, 9, 13):
    READERS.append(("produce_counts", produce_request_counts, v, _produce(v)))
    READERS.append(("produce_counts_parts", lambda ver, b: produce_request_counts_parts(ver, *_in_parts(b)), v,
                    _produce(v)))  # fmt: skip
    READERS.append(("produce_acks", produce_acks, v, _produce(v)))
for v in (3, 4, 11, 12, 16):
    READERS.append(("fetch_counts", fetch_response_counts, v, _fetch_response(v)))
    READERS.append(("fetch_counts_parts", lambda ver, b: fetch_response_counts_parts(ver, *_in_parts(b)), v,
                    _fetch_response(v)))  # fmt: skip
    READERS.append(("empty_fetch", lambda ver, b: empty_fetch_response(ver, *_in_parts(b), 5), v, _fetch_response(v)))
for v in (2, 3, 12, 15, 17):
    READERS.append(("fetch_max_bytes", fetch_max_bytes, v, _fetch_request(v)))
    READERS.append(("cap_fetch", lambda ver, b: cap_fetch_max_bytes(ver, b, 1000), v, _fetch_request(v)))
for v in (4, 5, 7):
    READERS.append(("create_topics", lambda ver, b: mutation_request(ApiKey.CreateTopics, ver, b), v,
                    _create_topics(v)))
    READERS.append(("split_create", lambda ver, b: _split_every_other(ApiKey.CreateTopics, ver, b), v,
                    _create_topics(v)))
for v in (3, 4, 6):
    READERS.append(("delete_topics", lambda ver, b: mutation_request(ApiKey.DeleteTopics, ver, b), v,
                    _delete_topics(v)))
    READERS.append(("split_delete", lambda ver, b: _split_every_other(ApiKey.DeleteTopics, ver, b), v,
                    _delete_topics(v)))
for v in (0, 2, 7):
    READERS.append(("merge_create", lambda ver, b: merge_mutation_response(ApiKey.CreateTopics, ver, b, TOPICS, [0, 2]),
                    v, _create_topics_response(v)))  # fmt: skip
READERS.append(("count_records", lambda ver, b: _count_records(b), 0, _records(3) + _records(2)))
READERS.append(("count_records_parts", lambda ver, b: _records_split(b), 0, _records(3) + _records(2)))

IDS = [f"{name}-v{version}" for name, _, version, _ in READERS]


def _only_body_errors(reader: Callable[[int, memoryview], object], version: int, data: bytes) -> None:
    try:
        reader(version, memoryview(data))
    except BodyError:
        pass


def _counts(records: int, batches: int) -> Callable[[int, object], None]:
    def check(version: int, result: object) -> None:
        assert isinstance(result, RecordCounts) and (result.records, result.batches) == (records, batches)
    return check


def _empty_fetch(version: int, result: object) -> None:
    empty = FetchResponse.decode(bytes(result)[len(_HEAD):], version=version)   # a whole frame, header kept
    assert (empty.throttle_time_ms, empty.error_code, empty.responses) == (5, 0, [])
    assert empty.session_id == (3 if version >= 7 else 0)  # the session survives, its data does not


def _fetch_max_bytes(version: int, result: object) -> None:
    assert result == (1 << 30 if version >= 3 else None)  # max_bytes exists from v3


def _cap_fetch(version: int, result: object) -> None:
    if version < 3:
        assert result is None  # no max_bytes to cap: the body stays as it was
        return
    capped = FetchRequest.decode(result, version=version)
    original = FetchRequest.decode(_fetch_request(version), version=version)
    assert capped.max_bytes == 1000
    assert capped.topics == original.topics and capped.max_wait_ms == original.max_wait_ms


def _is(expected: object) -> Callable[[int, object], None]:
    def check(version: int, result: object) -> None:
        assert result == expected
    return check


def _deleted(version: int, result: object) -> None:
    names = ("a", "b") if version <= 5 else ("a", "a")  # as _delete_topics builds them
    assert result == ([TopicMutation(n, None) for n in names], False)


def _split(cls: type, names: list[str]) -> Callable[[int, object], None]:
    def check(version: int, result: object) -> None:
        split = cls.decode(result, version=version)
        kept = split.topic_names if cls is DeleteTopicsRequest and version <= 5 else [t.name for t in split.topics]
        assert kept == names
    return check


def _merge_create(version: int, result: object) -> None:
    merged = CreateTopicsResponse.decode(result, version=version)
    # upstream answered c and a (admitted 0 and 2), kqp fills b: back in the request's order
    assert [(t.name, t.error_code) for t in merged.topics] == [("a", 0), ("b", 89), ("c", 0)]


# What each reader must read from its valid body (the builders above say why these numbers):
# Produce: 2 topics x 2 partitions, batches of 3 and 1 records; Fetch: 2 partitions of 2 records.
READS: dict[str, Callable[[int, object], None]] = {
    "produce_counts": _counts(8, 4),
    "produce_counts_parts": _counts(8, 4),
    "produce_acks": _is(1),
    "fetch_counts": _counts(4, 2),
    "fetch_counts_parts": _counts(4, 2),
    "empty_fetch": _empty_fetch,
    "fetch_max_bytes": _fetch_max_bytes,
    "cap_fetch": _cap_fetch,
    "create_topics": _is(([TopicMutation("t", 2, num_partitions=2, replication_factor=1)] * 2, False)),
    "split_create": _split(CreateTopicsRequest, ["t"]),
    "delete_topics": _deleted,
    "split_delete": _split(DeleteTopicsRequest, ["a"]),
    "merge_create": _merge_create,
    "count_records": _counts(5, 2),
    "count_records_parts": _counts(5, 2),
}


@pytest.mark.parametrize(("name", "reader", "version", "valid"), READERS, ids=IDS)
def test_valid_body_reads(name: str, reader: Callable, version: int, valid: bytes) -> None:
    READS[name](version, reader(version, memoryview(valid)))


@pytest.mark.parametrize(("name", "reader", "version", "valid"), READERS, ids=IDS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(name: str, reader: Callable, version: int, valid: bytes, data: bytes) -> None:
    _only_body_errors(reader, version, data)


@pytest.mark.parametrize(("name", "reader", "version", "valid"), READERS, ids=IDS)
@FUZZ
@given(data=st.data())
def test_mutated_valid_bodies(name: str, reader: Callable, version: int, valid: bytes, data: st.DataObject) -> None:
    body = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    tail = data.draw(st.binary(max_size=8))
    _only_body_errors(reader, version, bytes(body[:cut]) + tail)
