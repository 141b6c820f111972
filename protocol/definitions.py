"""kqp's own message definitions, in a small notation, made into kafka-python message classes.

Where kafka-python's copy of Kafka's JSON message schemas stops short (an API it has no schema for,
or a version it does not know yet), kqp writes the layout itself, from Kafka's public protocol
documentation, with the helpers here: :func:`field`, :func:`array` and :func:`struct` lay out one
field each with the versions it is on the wire, :func:`message` a whole request or response. They
build the same mapping ``kafka.protocol.schemas.load_json`` returns, so kqp's walkers, address
rewriting and throttle patching read kqp's definitions exactly as they read kafka-python's, and
:func:`message_class` makes a real kafka-python message class of one (kafka-python's metaclass,
handed the definition where it would read a JSON file named after the class), whose encoder and
decoder the tests hold the walkers to. :func:`extended` patches a schema kafka-python has through
its own ``json_patch`` hook. Every definition is checked against frames from a real Kafka.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.data_container import SlotsBuilder
from kafka.protocol.schemas import StructField

__all__ = ["Definition", "array", "extended", "field", "message", "message_class", "struct"]

#: A message or field definition: the mapping kafka-python's ``load_json`` returns for a schema.
Definition = dict[str, Any]


def field(name: str, kind: str, versions: str = "0+", *, nullable: str | None = None, tag: int | None = None,
          default: str | int | None = None) -> Definition:
    """One field of a primitive ``kind`` (``int32``, ``string``, ``records``, ``[]int32`` ...), on the wire
    at ``versions``; ``nullable`` the versions where it may be null; ``tag`` set: a tagged field."""
    out: Definition = {"name": name, "type": kind, "versions": versions}
    if nullable is not None:
        out["nullableVersions"] = nullable
    if tag is not None:
        out["tag"], out["taggedVersions"] = tag, versions
    if default is not None:
        out["default"] = default
    return out


def struct(name: str, type_name: str, *fields: Definition, versions: str = "0+",
           nullable: str | None = None) -> Definition:
    """A struct field named ``name`` of type ``type_name`` holding ``fields``."""
    out = field(name, type_name, versions, nullable=nullable, default="null" if nullable else None)
    out["fields"] = list(fields)
    return out


def array(name: str, type_name: str, *fields: Definition, versions: str = "0+",
          nullable: str | None = None) -> Definition:
    """An array field named ``name`` of ``type_name`` structs holding ``fields``."""
    return struct(name, "[]" + type_name, *fields, versions=versions, nullable=nullable)


def message(name: str, api_key: int, valid: str, flexible: str, *fields: Definition) -> Definition:
    """A request or response (told by ``name``'s ending) at versions ``valid``, flexible from ``flexible``."""
    kind = "request" if name.endswith("Request") else "response"
    return {"apiKey": api_key, "type": kind, "name": name, "validVersions": valid, "flexibleVersions": flexible,
            "fields": list(fields)}


class _Defined(type(ApiMessage)):   # type: ignore[misc]
    """kafka-python's message metaclass, given kqp's ``definition`` where it would read a JSON file."""

    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any],
                definition: Definition | None = None, **kw: Any) -> type:
        assert definition is not None and definition["name"] == name, name
        attrs = {**attrs, "_json": definition, "_struct": StructField(definition)}
        return SlotsBuilder.__new__(mcs, name, bases, attrs, **kw)   # the file reader is the step skipped

    def __init__(cls, name: str, bases: tuple[type, ...], attrs: dict[str, Any],
                 definition: Definition | None = None, **kw: Any) -> None:
        super().__init__(name, bases, attrs, **kw)


def message_class(definition: Definition) -> type:
    """A kafka-python message class (encode, decode, versioned wrappers) for kqp's ``definition``."""
    return _Defined(definition["name"], (ApiMessage,), {"__module__": __name__}, definition=definition)


def extended(base: type, patch: Callable[[Definition], None]) -> type:
    """kafka-python's message class ``base``, its schema first changed by ``patch`` (in place, on a
    copy): a newer Kafka's versions of a message kafka-python knows, through kafka-python's
    ``json_patch`` hook; ``base``'s own methods (ApiVersions' error-answer rule) are inherited."""

    inherited = getattr(base, "json_patch", None)   # kafka-python's own patch of the schema, first

    def json_patch(_cls: type, json: Definition) -> Definition:
        json = copy.deepcopy(json if inherited is None else inherited(json))
        patch(json)
        return json

    return type(base)(base.__name__, (base,), {"__module__": __name__, "json_patch": classmethod(json_patch)})
