"""DescribeClientQuotas and AlterClientQuotas (KIP-546) bodies, as plain values and back.

kqp answers these itself when it manages quotas (`admin.manage_quotas`). The requests are decoded
and the responses encoded with kafka-python's message classes (Kafka's own schemas, every version
they define); what crosses this module's edge is plain tuples, so the semantics
(`kqp.proxy.policies.quota_admin`) never touch kafka-python objects. An entity is Kafka's list of
``(entity type, name)`` components, a name ``None`` meaning the type's default.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from .apis import ApiKey
from .messages import decode_body, response_frame

__all__ = ["AlterEntry", "Component", "DescribeFilter", "decode_alter", "decode_describe", "encode_alter_response",
           "encode_describe_response"]

Entity = tuple[tuple[str, str | None], ...]   # ((entity type, name or None for the default), ...)


@dataclass(frozen=True, slots=True)
class Component:
    entity_type: str
    match_type: int          # 0 exact name, 1 the default, 2 any specified name
    match: str | None


@dataclass(frozen=True, slots=True)
class DescribeFilter:
    components: tuple[Component, ...]
    strict: bool             # only entities with no other entity types than the filter's


@dataclass(frozen=True, slots=True)
class AlterEntry:
    entity: Entity
    ops: tuple[tuple[str, float, bool], ...]   # (quota key, value, remove)



def decode_describe(version: int, body: memoryview | bytes) -> DescribeFilter:
    request = decode_body(DescribeClientQuotasRequest, version, body)
    components = tuple(Component(c.entity_type, c.match_type, c.match)
                       for c in request.components or ())   # type: ignore[attr-defined]
    return DescribeFilter(components, bool(request.strict))   # type: ignore[attr-defined]


def decode_alter(version: int, body: memoryview | bytes) -> tuple[list[AlterEntry], bool]:
    """The entries in request order, and validate_only."""
    request = decode_body(AlterClientQuotasRequest, version, body)
    entries = [AlterEntry(tuple((e.entity_type, e.entity_name) for e in entry.entity or ()),
                          tuple((op.key, float(op.value), bool(op.remove)) for op in entry.ops or ()))
               for entry in request.entries or ()]   # type: ignore[attr-defined]
    return entries, bool(request.validate_only)   # type: ignore[attr-defined]



def encode_describe_response(version: int, correlation_id: int, error_code: int, error_message: str | None,
                             entries: list[tuple[Entity, list[tuple[str, float]]]]) -> bytes:
    """A whole response frame; `throttle_time_ms` is 0 (the core raises it when a quota says so)."""
    cls = DescribeClientQuotasResponse
    data = None if error_code else [
        cls.EntryData(entity=[cls.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                      values=[cls.EntryData.ValueData(key=k, value=v) for k, v in values])
        for entity, values in entries]
    body = cls(throttle_time_ms=0, error_code=error_code, error_message=error_message,
               entries=data).encode(version=version)
    return response_frame(ApiKey.DescribeClientQuotas, version, correlation_id, bytes(body))


def encode_alter_response(version: int, correlation_id: int,
                          results: list[tuple[int, str | None, Entity]]) -> bytes:
    """A whole response frame: one `(error code, message, entity)` per request entry, in order."""
    cls = AlterClientQuotasResponse
    data = [cls.EntryData(error_code=code, error_message=message,
                          entity=[cls.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity])
            for code, message, entity in results]
    body = cls(throttle_time_ms=0, entries=data).encode(version=version)
    return response_frame(ApiKey.AlterClientQuotas, version, correlation_id, bytes(body))
