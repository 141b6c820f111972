"""What kqp reads from a Produce request (api key 0): its acks, and how many records it carries.

``acks`` decides whether a Produce request has a response at all (acks=0 has none, so a throttled
acks=0 client can only be muted, KIP-219), and the record and batch counts feed the record-rate
quotas (KIP-731). Both are read from the body in place by the schema walker
(:mod:`kqp.protocol.walker`): acks sits behind the nullable transactional id (v3+), and the counts
come from one walk over topic_data -> partition_data -> records that hands each records field to
:meth:`RecordCounts.add_from`. Topic names (v0-12) and topic ids (v13, KIP-516) are skipped alike.

``produce_acks`` runs for every Produce request, so the walk to acks is compiled per version at
import and looked up in a dict: one generated function call and one ``unpack_from`` per request.

A request that spans several reads is counted as the parts it arrived in
(``produce_request_counts_parts``): its record data is skipped across them, never joined.
"""

from __future__ import annotations

import struct

from .parts import Parts, SplitFrame
from .records import BodyError, RecordCounts, count_body_records, count_body_records_parts
from .varints import read_uvarint
from .walker import Buffer, MessageWalker, Walk, schema_versions, walker_for

__all__ = ["PRODUCE_VERSIONS", "produce_acks", "produce_request_counts", "produce_request_counts_parts",
           "produce_transactional_id"]

_MESSAGE = "ProduceRequest"
_I16 = struct.Struct(">h").unpack_from

PRODUCE_VERSIONS: range = schema_versions(_MESSAGE)
"""Produce request versions these readers understand (every version kafka-python's schema has)."""

_WALKERS: dict[int, MessageWalker] = {v: walker_for(_MESSAGE, v) for v in PRODUCE_VERSIONS}
# version -> the compiled walk from the body start to acks (every version has acks).
_TO_ACKS: dict[int, Walk] = {v: w.prefix(w.index("Acks")) for v, w in _WALKERS.items()}


def produce_acks(api_version: int, body: Buffer) -> int:
    """The request's ``acks`` (0, 1 or -1), read without touching topic data."""
    to_acks = _TO_ACKS.get(api_version)
    if to_acks is None:
        raise BodyError(f"{_MESSAGE} has no version {api_version}")
    pos = to_acks(body, 0)
    if pos + 2 > len(body):
        raise BodyError("Produce body truncated before acks")
    return _I16(body, pos)[0]


def produce_transactional_id(api_version: int, body: Buffer) -> str | None:
    """The request's transactional id (v3+, a nullable string first in the body; compact from v9)."""
    if api_version < 3:
        return None
    try:
        if api_version >= 9:
            length, pos = read_uvarint(body, 0)
            length -= 1
        else:
            length, pos = _I16(body, 0)[0], 2
    except (IndexError, struct.error):
        raise BodyError("Produce body truncated in its transactional id") from None
    if length < 0:
        return None
    if pos + length > len(body):
        raise BodyError("Produce body truncated in its transactional id")
    return bytes(body[pos:pos + length]).decode("utf-8", "replace")


def produce_request_counts(api_version: int, body: Buffer) -> RecordCounts:
    """Records and record batches across every partition of the request."""
    return count_body_records(_WALKERS, _MESSAGE, api_version, body)


def produce_request_counts_parts(api_version: int, parts: Parts, body_offset: int) -> RecordCounts:
    """:func:`produce_request_counts` of a whole request frame given as the parts it arrived in
    (size prefix included; the body starts at ``body_offset``). No record data is copied; a frame
    in one part is walked in place exactly as ``produce_request_counts`` walks it."""
    if len(parts) == 1:
        return count_body_records(_WALKERS, _MESSAGE, api_version, memoryview(parts[0])[body_offset:])
    return count_body_records_parts(_WALKERS, _MESSAGE, api_version, SplitFrame(parts), body_offset)
