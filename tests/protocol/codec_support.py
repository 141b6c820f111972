"""Shared helpers for kqp.protocol's tests: sample messages built from kafka-python's schemas.

``sample_message(cls, version)`` fills every field present at that version (tagged ones too)
with a non-default value, two elements per array, so a test that round-trips a message notices
any field that kqp moved, dropped or misread. Addresses get a recognisable upstream host.
"""

from __future__ import annotations

import re
import struct
import uuid
from pathlib import Path
from typing import Any

from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from kqp.protocol.apis import API_NAMES, message_classes
from kqp.protocol.headers import encode_response_header

UPSTREAM_HOST = "upstream.example"
FRAMES_DIR = Path(__file__).parent / "frames"


def _simple_value(field: SimpleField, salt: int) -> Any:
    name, kind = field.name, field.type_str
    if name == "error_code":
        return 0  # a failed endpoint is left alone by design; tests want live ones
    if name in ("node_id", "broker_id", "leader_id"):
        return 1 + salt
    if name == "host":
        return UPSTREAM_HOST
    if name == "port":
        return 9092 + salt
    if kind in ("int8", "int16", "uint16", "int32", "int64"):
        return 3 + salt
    if kind == "bool":
        return True
    if kind == "float64":
        return 1.5
    if kind == "uuid":
        return uuid.UUID(int=5 + salt)
    if kind == "string":
        return f"s{salt}"
    if kind in ("bytes", "records"):
        return bytes([1, 2, 3, salt & 0xFF])
    if kind == "bitfield":
        return {1, 3}
    raise AssertionError(f"no sample for {kind}")


def _struct_value(struct_field: StructField, version: int, salt: int, flexible: bool) -> Any:
    values = {}
    for i, f in enumerate(struct_field._fields):
        if not f.for_version_q(version):
            continue
        if f.tag is not None and (not flexible or not f.tagged_field_q(version)):
            continue
        values[f.name] = _value(f, version, salt + i, flexible)
    return struct_field.data_class(version=version, **values)


def _value(field: Any, version: int, salt: int, flexible: bool) -> Any:
    if isinstance(field, StructArrayField):
        return [_struct_value(field.array_of, version, salt + k, flexible) for k in range(2)]
    if isinstance(field, ArrayField):
        return [_simple_value(field.array_of, salt + k) for k in range(2)]
    if isinstance(field, StructField):
        return _struct_value(field, version, salt, flexible)
    return _simple_value(field, salt)


def sample_message(cls: type, version: int) -> Any:
    """A kafka-python message with every field of ``version`` set to a non-default value."""
    flexible = cls.flexible_version_q(version)
    values = {}
    for i, f in enumerate(cls._struct._fields):
        if not f.for_version_q(version):
            continue
        if f.tag is not None and (not flexible or not f.tagged_field_q(version)):
            continue
        if f.name == "throttle_time_ms":
            values[f.name] = 100  # tests raise it above and below this
            continue
        values[f.name] = _value(f, version, i, flexible)
    return cls(version=version, **values)


def response_frame(api_key: int, version: int, message: Any, correlation_id: int = 42) -> memoryview:
    """A whole response frame (size prefix, header, body) around ``message``."""
    body = message.encode(version=version)
    header = encode_response_header(api_key, version, correlation_id)
    return memoryview(struct.pack(">i", len(header) + len(body)) + header + body)


def decode_body(api_key: int, version: int, frame: bytes | memoryview, body_offset: int) -> Any:
    return message_classes(api_key)[1].decode(memoryview(frame)[body_offset:], version=version)


def recorded_frames() -> list[tuple[str, int, int, memoryview]]:
    """The captured upstream frames: (file name, api key, version, frame)."""
    keys = {name: key for key, name in API_NAMES.items()}
    out = []
    for path in sorted(FRAMES_DIR.glob("*.bin")):
        match = re.fullmatch(r"(\w+)-(\w+)-v(\d+)\.bin", path.name)
        assert match, path.name
        out.append((path.name, keys[match[2]], int(match[3]), memoryview(path.read_bytes())))
    return out
