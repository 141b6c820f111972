"""What the wire tap reads from a frame: labels, acks, record counts, throttles, and the address
patterns it rewrites.

Kept apart from the relay (`wire_tap.py`) because these are the checks that must not share a bug
with kqp: records are counted and `throttle_time_ms` is read with kafka-python's classes, and
addresses are rewritten by byte substitution, not by kqp's rewriter.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords

from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import parse_request_header, response_body_offset
from kqp.protocol.produce import produce_acks
from kqp.protocol.records import BodyError

__all__ = ["address_substitutions", "expects_response", "fetch_counts", "produce_counts", "produce_records",
           "request_labels", "response_throttle_ms"]

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
# Share and streams group responses that start with throttle_time_ms, read without kqp's definitions.
_THROTTLE_FIRST = frozenset({ApiKey.ShareFetch, ApiKey.ShareAcknowledge, ApiKey.ShareGroupHeartbeat,
                             ApiKey.ShareGroupDescribe, ApiKey.StreamsGroupHeartbeat, ApiKey.StreamsGroupDescribe})


def request_labels(frame: memoryview) -> tuple[int, int, int, str | None, int | None]:
    """(api key, version, correlation id, client id, body offset) of a whole request frame.

    Every header version starts with the first three; a header kqp.protocol cannot parse (an API
    or version it does not know) keeps them, with no client id and no body offset.
    """
    try:
        header = parse_request_header(frame)
    except ProtocolError:
        api_key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 4)
        return api_key, version, correlation_id, None, None
    return header.api_key, header.api_version, header.correlation_id, header.client_id, header.body_offset


def expects_response(api_key: int, version: int, frame: memoryview, body_offset: int | None) -> bool:
    """False for an acks=0 Produce request (the only request a broker does not answer)."""
    if api_key != ApiKey.Produce or body_offset is None:
        return True
    try:
        return produce_acks(version, frame[body_offset:]) != 0
    except (BodyError, ProtocolError, IndexError, struct.error):
        return True  # an undecodable request is the proxy's problem to report, not the tap's


def produce_records(frame: memoryview, version: int) -> int:
    """Records a Produce request carries, counted with kafka-python's record classes (batch headers;
    legacy message sets walked), so a test can prove what reached the upstream, resends included,
    without trusting kqp's own record counting."""
    return produce_counts(frame, version)[0]


def produce_counts(frame: memoryview, version: int) -> tuple[int, int]:
    """(records, batches) of a Produce request (`produce_records`)."""
    try:
        request = ProduceRequest.decode(bytes(frame[4:]), version=version, header=True)
    except Exception:  # an undecodable request is the proxy's problem to report, not the tap's
        return 0, 0
    return _counts(partition.records for topic in request.topic_data for partition in topic.partition_data)


def fetch_counts(frame: memoryview, version: int) -> tuple[int, int]:
    """(records, batches) of a whole Fetch response frame, with kafka-python's classes."""
    try:
        offset = response_body_offset(ApiKey.Fetch, version, frame)
        response = FetchResponse.decode(bytes(frame[offset:]), version=version)
    except Exception:  # as above: the tap reports, it does not crash
        return 0, 0
    return _counts(partition.records for topic in response.responses for partition in topic.partitions)


def _counts(record_sets: Iterable[bytes | None]) -> tuple[int, int]:
    records = batches = 0
    for data in record_sets:
        for batch in MemoryRecords(bytes(data or b"")):
            count = getattr(batch, "records_count", None)
            records += count if count is not None else sum(1 for _ in batch)
            batches += 1
    return records, batches


def response_throttle_ms(frame: memoryview, api_key: int, version: int) -> int | None:
    """`throttle_time_ms` of a whole response frame, None where the version has none, read with
    kafka-python's classes so that a misplaced field in kqp's codec cannot confirm itself."""
    try:
        offset = response_body_offset(api_key, version, frame)
        if api_key == ApiKey.Fetch:
            return _I32.unpack_from(frame, offset)[0] if version >= 1 else None
        if api_key in _THROTTLE_FIRST:   # the first field at every version, as Kafka's definitions say
            return _I32.unpack_from(frame, offset)[0]
        decoded = message_classes(api_key)[1].decode(bytes(frame[offset:]), version=version)
    except Exception:  # an undecodable response is reported as "no throttle", not as a tap crash
        return None
    value = getattr(decoded, "throttle_time_ms", None)
    return value if isinstance(value, int) else None


def address_substitutions(target: tuple[str, int], hop: tuple[str, int]) -> list[tuple[bytes, bytes]]:
    """Byte patterns that turn `target` into `hop` wherever a response carries it."""
    (th, tp), (hh, hp) = target, hop
    tb, hb = th.encode(), hh.encode()
    return [
        (_I16.pack(len(tb)) + tb + _I32.pack(tp), _I16.pack(len(hb)) + hb + _I32.pack(hp)),   # classic
        (bytes([len(tb) + 1]) + tb + _I32.pack(tp), bytes([len(hb) + 1]) + hb + _I32.pack(hp)),  # compact
    ]
