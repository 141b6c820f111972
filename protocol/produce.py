"""What kqp reads from a Produce request (api key 0): its acks, and how many records it carries.

``acks`` decides whether a Produce request has a response at all (acks=0 has none, so a throttled
acks=0 client can only be muted, KIP-219), and the record and batch counts feed the record-rate
quotas (KIP-731). Both are read from the body in place: acks sits behind the nullable
transactional id (v3+), and the counts come from walking topic_data -> partition_data -> records
by the ProduceRequest schema, reading RecordBatch headers only (see ``records.py``). Topic names
(v0-12) and topic ids (v13, KIP-516) are skipped alike, so nothing here depends on them.
"""

from __future__ import annotations

import struct

from .records import BodyError, RecordCounts, count_body_records, field_position, schema_versions

__all__ = ["PRODUCE_VERSIONS", "produce_acks", "produce_request_counts"]

_MESSAGE = "ProduceRequest"
_I16 = struct.Struct(">h")

PRODUCE_VERSIONS: range = schema_versions(_MESSAGE)
"""Produce request versions these readers understand (every version kafka-python's schema has)."""


def produce_acks(api_version: int, body: memoryview | bytes) -> int:
    """The request's ``acks`` (0, 1 or -1), read without touching topic data."""
    pos = field_position(_MESSAGE, api_version, "Acks", body)
    if pos is None:  # every version has acks; a schema without it is not one kqp can serve
        raise BodyError(f"{_MESSAGE} v{api_version} has no Acks field")
    if pos + 2 > len(body):
        raise BodyError("Produce body truncated before acks")
    return _I16.unpack_from(body, pos)[0]


def produce_request_counts(api_version: int, body: memoryview | bytes) -> RecordCounts:
    """Records and record batches across every partition of the request."""
    return count_body_records(_MESSAGE, api_version, body)
