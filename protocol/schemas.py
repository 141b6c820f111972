"""What Apache Kafka's JSON message definitions say of a field at a version, for the walkers.

Read through kafka-python's public ``load_json`` (the data its message classes are built from), or
from kqp's own definitions where they replace or add to kafka-python's (:mod:`kqp.protocol.kafka44`):
which fields are on the wire at a version, which are tagged, and which have a constant size.
"""

from __future__ import annotations

from functools import cache

from kafka.protocol.schemas import BaseField, load_json

from .kafka44 import DEFINITIONS

__all__ = ["FIXED_SIZES", "LENGTH_PREFIXED", "fixed_size", "in_versions", "schema", "schema_versions", "untagged"]

FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "float64": 8, "uuid": 16,
}  # fmt: skip
LENGTH_PREFIXED = {"string": 2, "bytes": 4, "records": 4}  # classic length width


def in_versions(spec: str | None, version: int) -> bool:
    """Whether a schema's version spec (\"3+\", \"0-7\", None) includes ``version``."""
    bounds = BaseField.parse_versions(spec)
    return bounds is not None and bounds[0] <= version <= bounds[1]


@cache
def schema(message: str) -> dict:
    """Apache Kafka's JSON message definition, as kafka-python ships it or kqp defines it."""
    own = DEFINITIONS.get(message)
    return own if own is not None else load_json(message)


def schema_versions(message: str) -> range:
    """Versions kqp can walk for a message: 0 up to the schema's newest, as kafka-python's classes."""
    return range(BaseField.parse_versions(schema(message)["validVersions"])[1] + 1)


def untagged(fields: list[dict], version: int, flexible: bool) -> list[dict]:
    """The fields of a struct on the wire at ``version``, in order; tagged ones live in its tag section."""
    return [
        f for f in fields
        if in_versions(f.get("versions"), version) and not (flexible and in_versions(f.get("taggedVersions"), version))
    ]  # fmt: skip


def fixed_size(field: dict, version: int, flexible: bool) -> int | None:
    """A field's constant wire size at ``version``, or None when it varies."""
    kind = field["type"]
    if kind in FIXED_SIZES:
        return FIXED_SIZES[kind]
    if kind.startswith("[]") or kind in LENGTH_PREFIXED or "fields" not in field:
        return None
    if flexible or in_versions(field.get("nullableVersions"), version):
        return None  # a tag section or a null marker
    sizes = [fixed_size(f, version, flexible) for f in untagged(field["fields"], version, flexible)]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]
