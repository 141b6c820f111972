"""Produce v0-v2 and Fetch v0-v3: kqp's layouts checked against an independent source.

kqp lays these versions out from the schemas kafka-python ships (Kafka 4's, whose field ranges
still describe them) and Kafka 3.9's validVersions (`kqp.protocol.kafka39`). The bodies here are
built with kafka-python's hand-written classes of Kafka 0.8-0.10's versions
(`kafka.protocol.old`), which were written from Kafka's protocol guide, not from the JSON: every
field, in order, with its type, must match, and every reader (acks, record counts, max_bytes,
throttle_time_ms, the empty throttled Fetch) must agree with their encoder and decoder.

Wire facts, from Kafka 3.9's definitions: Produce v0 and Fetch v0 responses have no
throttle_time_ms (added in v1); Fetch max_bytes arrived in v3 (KIP-74); records are legacy
message sets (magic 0 before v2, magic 1 from Produce v2 / Fetch v2).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.protocol.old import fetch as old_fetch
from kafka.protocol.old import produce as old_produce
from kafka.protocol.old.types import Array, Bytes, Int16, Int32, Int64, Schema, String
from kafka.record.memory_records import MemoryRecordsBuilder

from kqp.protocol.advertised import advertised_ranges, header_only_pairs
from kqp.protocol.apis import ApiKey, decodable_range
from kqp.protocol.fetch import cap_fetch_max_bytes, empty_fetch_response, fetch_max_bytes, fetch_response_counts
from kqp.protocol.produce import produce_acks, produce_request_counts
from kqp.protocol.records import RecordCounts
from kqp.protocol.schemas import schema, untagged
from kqp.protocol.throttle_field import throttle_field_kind, throttle_patch_parts
from kqp.protocol.walker import walker_for

OLD = {
    ("ProduceRequest", v): getattr(old_produce, f"ProduceRequest_v{v}") for v in range(3)
} | {
    ("ProduceResponse", v): getattr(old_produce, f"ProduceResponse_v{v}") for v in range(3)
} | {
    ("FetchRequest", v): getattr(old_fetch, f"FetchRequest_v{v}") for v in range(4)
} | {
    ("FetchResponse", v): getattr(old_fetch, f"FetchResponse_v{v}") for v in range(4)
}
_PRIMITIVES = {Int16: "int16", Int32: "int32", Int64: "int64"}


def _shape(fields: list[dict], version: int) -> list[Any]:
    """A struct's wire shape from kqp's schema view at ``version``: types, arrays nested."""
    out: list[Any] = []
    for f in untagged(fields, version, flexible=False):
        kind = f["type"]
        if kind.startswith("[]"):
            out.append(_shape(f["fields"], version))
        else:
            out.append({"records": "bytes"}.get(kind, kind))
    return out


def _old_shape(node: Any) -> list[Any]:
    """The same shape from a kafka.protocol.old Schema."""
    out: list[Any] = []
    for field in node.fields:
        if isinstance(field, Array):
            out.append(_old_shape(field.array_of))
        elif isinstance(field, String):
            out.append("string")
        elif field is Bytes or isinstance(field, Bytes):
            out.append("bytes")
        else:
            out.append(_PRIMITIVES[field])
    return out


@pytest.mark.parametrize(("message", "version"), sorted(OLD))
def test_old_layouts_match_kafka_pythons_hand_written_classes(message: str, version: int) -> None:
    old = OLD[message, version].SCHEMA
    assert isinstance(old, Schema)
    assert _shape(schema(message)["fields"], version) == _old_shape(old)
    names = [n.replace("_", "") for n in old.names]
    assert [n.lower() for n in walker_for(message, version).names] == names


def test_produce_and_fetch_are_decodable_and_advertised_from_v0() -> None:
    assert decodable_range(ApiKey.Produce)[0] == 0 and decodable_range(ApiKey.Fetch)[0] == 0
    # An upstream that serves Kafka 3.9's ranges gets them advertised whole, old versions included.
    upstream = {ApiKey.Produce: (0, 11), ApiKey.Fetch: (0, 17), ApiKey.ListOffsets: (0, 9)}
    assert advertised_ranges(upstream) == upstream
    assert {(ApiKey.Produce, 0), (ApiKey.Fetch, 0)}.isdisjoint(header_only_pairs())


def message_set(magic: int, n: int) -> bytes:
    builder = MemoryRecordsBuilder(magic, 0, 1 << 20, offset=0)
    for i in range(n):
        builder.append(1_700_000_000_000 + i, None, b"v%d" % i)
    builder.close()
    return bytes(builder.buffer())


def magic_for(version: int) -> int:
    return 1 if version >= 2 else 0


@pytest.mark.parametrize("version", range(3))
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_request_acks_and_counts(version: int, acks: int) -> None:
    records = message_set(magic_for(version), 3)
    body = OLD["ProduceRequest", version](acks, 1500, [("t", [(0, records), (1, records)]), ("u", [(0, records)])])
    raw = body.encode()
    assert produce_acks(version, raw) == acks
    # A legacy message set: each message one record and one batch (Kafka's shallow iteration).
    assert produce_request_counts(version, raw) == RecordCounts(9, 9)
    assert walker_for("ProduceRequest", version).body_end(raw, 0) == len(raw)


def frame(body: bytes, correlation_id: int = 7) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


@pytest.mark.parametrize("version", range(3))
def test_produce_response_throttle_where_the_version_has_it(version: int) -> None:
    partition = (0, 0, 42) if version < 2 else (0, 0, 42, -1)
    args: list[Any] = [[("t", [partition, partition])]]
    if version >= 1:
        args.append(5)
    raw = frame(OLD["ProduceResponse", version](*args).encode())
    patched, _ = throttle_patch_parts(ApiKey.Produce, version, (memoryview(raw),), 8, 900)
    if version == 0:   # v0 has no throttle_time_ms: nothing to patch, the mute alone throttles
        assert throttle_field_kind(ApiKey.Produce, 0) == "none" and patched is None
        return
    assert throttle_field_kind(ApiKey.Produce, version) == "walk"
    assert patched is not None
    decoded = OLD["ProduceResponse", version].decode(b"".join(patched)[8:])
    assert decoded.throttle_time_ms == 900 and decoded.responses == [("t", [partition, partition])]


def fetch_request(version: int, max_bytes: int = 1 << 20, min_bytes: int = 1 << 20) -> bytes:
    fields: list[Any] = [-1, 500, min_bytes]
    if version >= 3:
        fields.append(max_bytes)
    fields.append([("t", [(0, 5, 65536), (1, 9, 65536)])])
    return OLD["FetchRequest", version](*fields).encode()


@pytest.mark.parametrize("version", range(4))
def test_fetch_request_max_bytes_capped_from_v3(version: int) -> None:
    raw = fetch_request(version)
    capped = cap_fetch_max_bytes(version, raw, 4096)
    if version < 3:   # no max_bytes field before KIP-74: nothing a proxy can lower
        assert fetch_max_bytes(version, raw) is None and capped is None
        return
    assert fetch_max_bytes(version, raw) == 1 << 20
    assert capped is not None
    decoded = OLD["FetchRequest", version].decode(capped)
    assert (decoded.max_bytes, decoded.min_bytes) == (4096, 4096)
    assert decoded.topics == [("t", [(0, 5, 65536), (1, 9, 65536)])]


def fetch_response(version: int, throttle_ms: int = 0) -> bytes:
    records = message_set(magic_for(version), 4)
    topics = [("t", [(0, 0, 10, records), (1, 0, 10, b"")])]
    args: list[Any] = [topics] if version == 0 else [throttle_ms, topics]
    return frame(OLD["FetchResponse", version](*args).encode())


@pytest.mark.parametrize("version", range(4))
def test_fetch_response_counts_and_throttle(version: int) -> None:
    raw = fetch_response(version)
    assert fetch_response_counts(version, memoryview(raw)[8:]) == RecordCounts(4, 4)
    patched, _ = throttle_patch_parts(ApiKey.Fetch, version, (memoryview(raw),), 8, 1200)
    if version == 0:   # Fetch v0 has no throttle_time_ms (added in v1)
        assert throttle_field_kind(ApiKey.Fetch, 0) == "none" and patched is None
        return
    assert throttle_field_kind(ApiKey.Fetch, version) == "first"
    assert patched is not None
    assert OLD["FetchResponse", version].decode(b"".join(patched)[8:]).throttle_time_ms == 1200


@pytest.mark.parametrize("version", range(4))
def test_empty_fetch_response_in_the_old_layout(version: int) -> None:
    raw = fetch_response(version)
    empty = empty_fetch_response(version, (memoryview(raw),), 8, 1200)
    assert struct.unpack_from(">ii", empty) == (len(empty) - 4, 7)
    decoded = OLD["FetchResponse", version].decode(empty[8:])
    assert decoded.responses == []
    if version >= 1:
        assert decoded.throttle_time_ms == 1200
