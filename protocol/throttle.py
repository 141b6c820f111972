"""Where ``throttle_time_ms`` sits in each response, and reading or raising it in place.

KIP-219 has kqp answer at once with ``throttle_time_ms`` filled in. The field is an int32 whose
position is derived here from kafka-python's schemas, per (api key, version), at import:

* ``"first"``: it is the first body field, so it lives at ``body_offset`` (most APIs);
* ``"walk"``: it comes after other fields, some variable-length (Produce after its responses,
  ApiVersions after its api keys, OffsetDelete after its error code); the offset is found by the
  schema-driven skip walker (:mod:`kqp.protocol.walker`), which only reads lengths and counts;
* ``"none"``: this version has no throttle field (e.g. Metadata v0-v2, SaslHandshake).

Deviation from the first plan, on purpose: "walk" responses are *not* decoded and re-encoded with
kafka-python. Walking finds the field's offset without building objects, and the patch is then the
same 4-byte overwrite as for "first" - cheaper, and it cannot lose fields a re-encode would drop.

Patching never writes into the caller's frame (it views immutable received bytes): it copies the
head up to and including the field, overwrites the int32 there, and joins the untouched tail once.
:func:`throttle_patch_parts` returns head and tail separately for ``transport.writelines``, which
avoids even that one copy of a Fetch response's record data.
"""

from __future__ import annotations

import struct
from typing import Literal

from .apis import kqp_ranges, message_classes
from .errors import ProtocolError
from .walker import Walk, walker_for

__all__ = [
    "ThrottleKind",
    "patch_throttle_ms",
    "read_throttle_ms",
    "throttle_field_kind",
    "throttle_field_offset",
    "throttle_patch_parts",
]

ThrottleKind = Literal["none", "first", "walk"]
_FIELD = "ThrottleTimeMs"
_I32 = struct.Struct(">i")


def _build() -> tuple[dict[tuple[int, int], ThrottleKind], dict[tuple[int, int], Walk]]:
    kinds: dict[tuple[int, int], ThrottleKind] = {}
    walks: dict[tuple[int, int], Walk] = {}  # the compiled walk from the body start to the field
    for api_key, (lo, hi) in kqp_ranges().items():
        response_cls = message_classes(api_key)[1]
        for version in range(lo, hi + 1):
            walker = walker_for(response_cls, version)
            if _FIELD not in walker.names:
                kinds[api_key, version] = "none"
            elif walker.index(_FIELD) == 0:
                kinds[api_key, version] = "first"
            else:
                kinds[api_key, version] = "walk"
                walks[api_key, version] = walker.prefix(walker.index(_FIELD))
    return kinds, walks


_KINDS, _WALKS = _build()


def throttle_field_kind(api_key: int, version: int) -> ThrottleKind:
    """How to reach ``throttle_time_ms`` in this response version ("none" for unknown ones too)."""
    return _KINDS.get((api_key, version), "none")


def throttle_field_offset(api_key: int, api_version: int, frame: memoryview, body_offset: int) -> int | None:
    """Offset in ``frame`` of the int32 ``throttle_time_ms``, or None when the version has none."""
    key = (api_key, api_version)
    kind = _KINDS.get(key, "none")
    if kind == "first":
        offset = body_offset
    elif kind == "walk":
        offset = _WALKS[key](frame, body_offset)
    else:
        return None
    if offset + 4 > len(frame):
        raise ProtocolError("response is too short to hold throttle_time_ms")
    return offset


def read_throttle_ms(api_key: int, api_version: int, frame: memoryview, body_offset: int) -> int | None:
    """The response's ``throttle_time_ms``, or None when this version has no such field."""
    offset = throttle_field_offset(api_key, api_version, frame, body_offset)
    return None if offset is None else _I32.unpack_from(frame, offset)[0]


def throttle_patch_parts(
    api_key: int, api_version: int, frame: memoryview, body_offset: int, throttle_ms: int
) -> tuple[bytes, memoryview] | None:
    """``(head, tail)`` whose concatenation is the frame with ``throttle_time_ms = max(existing,
    throttle_ms)``, or None when nothing changes (no field, or the existing value is not lower).

    The head is a small fresh copy; the tail is a view of the caller's frame.
    """
    offset = throttle_field_offset(api_key, api_version, frame, body_offset)
    if offset is None:
        return None
    end = offset + 4
    if _I32.unpack_from(frame, offset)[0] >= throttle_ms:
        return None
    head = bytearray(frame[:end])
    _I32.pack_into(head, offset, min(throttle_ms, 0x7FFFFFFF))
    return bytes(head), frame[end:]


def patch_throttle_ms(
    api_key: int, api_version: int, frame: memoryview, body_offset: int, throttle_ms: int
) -> bytes | memoryview:
    """The frame with ``throttle_time_ms = max(existing, throttle_ms)``; the same object if unchanged.

    Costs one copy of the frame (the join); use :func:`throttle_patch_parts` to avoid it.
    """
    parts = throttle_patch_parts(api_key, api_version, frame, body_offset, throttle_ms)
    if parts is None:
        return frame
    head, tail = parts
    return head + tail
