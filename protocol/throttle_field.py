"""Where ``throttle_time_ms`` sits in each response, and raising it in place.

KIP-219 has kqp answer at once with ``throttle_time_ms`` filled in. The int32's position is
derived from the schemas kqp carries per (api key, version) at import: ``"first"`` (the first body
field, most APIs), ``"walk"`` (behind variable-length fields: Produce, ApiVersions, OffsetDelete;
the skip walker finds the offset reading only lengths and counts) or ``"none"`` (no such field).
An API kqp passes on its header alone is ``"first"`` where Kafka's facts say every version's
response starts with it (``Unschemed.throttle_first``: the group heartbeats of KIP-848, 932, 1071).

A "walk" response is not decoded and re-encoded: the patch is the same 4-byte overwrite as for
"first", cheaper, and it cannot drop fields a re-encode would lose. Patching never writes into the
caller's frame and never copies it: :func:`throttle_patch_parts` returns views of the original
parts around a fresh 4-byte field, for ``transport.writelines``.
"""

from __future__ import annotations

import struct
from typing import Literal

from kqp.protocol.apis import UNSCHEMED, kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.parts import Parts, SplitFrame
from kqp.protocol.walker import PartsWalk, walker_for

__all__ = ["ThrottleKind", "throttle_field_kind", "throttle_patch_parts"]

ThrottleKind = Literal["none", "first", "walk"]
_FIELD = "ThrottleTimeMs"
_I32 = struct.Struct(">i")
_MAX_MS = 0x7FFFFFFF


def _build() -> tuple[dict[tuple[int, int], ThrottleKind], dict[tuple[int, int], PartsWalk]]:
    kinds: dict[tuple[int, int], ThrottleKind] = {}
    walks: dict[tuple[int, int], PartsWalk] = {}  # the compiled walk from the body start to the field
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
                walks[api_key, version] = walker.prefix_parts(walker.index(_FIELD))
    for api_key, facts in UNSCHEMED.items():
        if facts.throttle_first:
            kinds.update(dict.fromkeys(((api_key, v) for v in range(facts.newest + 1)), "first"))
    return kinds, walks


_KINDS, _WALKS = _build()


def throttle_field_kind(api_key: int, version: int) -> ThrottleKind:
    """How to reach ``throttle_time_ms`` in this response version ("none" for unknown ones too)."""
    return _KINDS.get((api_key, version), "none")


def throttle_patch_parts(
    api_key: int, api_version: int, parts: Parts, body_offset: int, throttle_ms: int
) -> tuple[Parts | None, int]:
    """The response frame ``parts`` (as it arrived, size prefix included, its body at ``body_offset``)
    with ``throttle_time_ms = max(existing, throttle_ms)``, as parts to write in order, and the
    existing value (the upstream's own throttle; 0 where the version has no field). The parts are
    None when nothing changes (no field, or the existing value is not lower).

    The result is views of ``parts`` around a fresh 4-byte field: nothing of the frame is copied.
    A response too short to hold the field is a :class:`ProtocolError`.
    """
    key = (api_key, api_version)
    kind = _KINDS.get(key, "none")
    if kind == "none":
        return None, 0
    frame = SplitFrame(parts)
    offset = body_offset if kind == "first" else _WALKS[key](frame, body_offset)
    if offset + 4 > frame.total:
        raise ProtocolError("response is too short to hold throttle_time_ms")
    buf, start = frame.window(offset, 4)
    existing: int = _I32.unpack_from(buf, offset - start)[0]
    if existing >= throttle_ms:
        return None, existing
    patched = (*frame.views(0, offset), _I32.pack(min(throttle_ms, _MAX_MS)), *frame.views(offset + 4, frame.total))
    return patched, existing
