"""throttle_time_ms raised for every (api, version) kqp decodes, checked with kafka-python."""

from __future__ import annotations

import pytest
from codec_support import decode_body, recorded_frames, response_frame, sample_message

from kqp.protocol.apis import ApiKey, kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_body_offset
from kqp.protocol.throttle_field import throttle_field_kind, throttle_patch_parts

ALL = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)]
WITH_FIELD = [(k, v) for k, v in ALL if throttle_field_kind(k, v) != "none"]


def build(api_key: int, version: int, populated: bool) -> tuple[object, memoryview, int]:
    cls = message_classes(api_key)[1]
    message = sample_message(cls, version) if populated else cls(version=version, throttle_time_ms=100)
    frame = response_frame(api_key, version, message)
    return message, frame, response_body_offset(api_key, version, frame)


def patched(api_key: int, version: int, frame: memoryview, offset: int, throttle_ms: int) -> bytes | None:
    parts, _existing = throttle_patch_parts(api_key, version, (frame,), offset, throttle_ms)
    return None if parts is None else b"".join(parts)


def test_kinds_are_derived_from_field_order() -> None:
    assert throttle_field_kind(ApiKey.Fetch, 12) == "first"  # throttle_time_ms leads
    assert throttle_field_kind(ApiKey.Produce, 9) == "walk"  # after the responses array
    assert throttle_field_kind(ApiKey.ApiVersions, 3) == "walk"  # after the api keys
    assert throttle_field_kind(ApiKey.OffsetDelete, 0) == "walk"  # after error_code
    assert throttle_field_kind(ApiKey.ApiVersions, 0) == "none"
    assert [throttle_field_kind(ApiKey.Metadata, v) for v in (2, 3)] == ["none", "first"]  # Metadata from v3
    assert throttle_field_kind(ApiKey.SaslHandshake, 1) == "none"  # never had one
    assert throttle_field_kind(ApiKey.LeaderAndIsr, 0) == "none"  # an api kqp does not decode: nothing to patch
    assert len(WITH_FIELD) > 200


@pytest.mark.parametrize(("api_key", "version"), WITH_FIELD)
@pytest.mark.parametrize("populated", [False, True], ids=["defaults", "populated"])
def test_patch_raises_throttle_and_keeps_everything_else(api_key: int, version: int, populated: bool) -> None:
    message, frame, offset = build(api_key, version, populated)
    parts, existing = throttle_patch_parts(api_key, version, (frame,), offset, 2500)
    assert parts is not None and existing == 100   # the upstream's own throttle, read as it is raised
    new = b"".join(parts)
    assert len(new) == len(frame) and new[:offset] == bytes(frame[:offset])
    decoded = decode_body(api_key, version, new, offset)
    assert decoded.throttle_time_ms == 2500
    # Every other byte intact: only the 4 bytes of the field changed.
    changed = [i for i in range(len(new)) if new[i] != frame[i]]
    assert changed and changed[-1] - changed[0] < 4
    if populated:   # and every other field, compared field by field (a message of defaults shares
        decoded.throttle_time_ms = 100   # kafka-python's default objects, which other code may touch)
        assert decoded == message
    # Nothing of the frame is copied: views of it around the new 4-byte field.
    assert [len(p) for p in parts if not isinstance(p, memoryview)] == [4]
    assert all(p.obj is frame.obj for p in parts if isinstance(p, memoryview))


@pytest.mark.parametrize(("api_key", "version"), WITH_FIELD)
def test_lower_or_equal_throttle_changes_nothing(api_key: int, version: int) -> None:
    _, frame, offset = build(api_key, version, populated=False)
    for lower in (100, 5, 0):
        assert throttle_patch_parts(api_key, version, (frame,), offset, lower) == (None, 100)


@pytest.mark.parametrize(("api_key", "version"), [(k, v) for k, v in ALL if throttle_field_kind(k, v) == "none"])
def test_versions_without_a_field_pass_through(api_key: int, version: int) -> None:
    _, frame, offset = build(api_key, version, populated=True)
    assert throttle_patch_parts(api_key, version, (frame,), offset, 1000) == (None, 0)


def test_throttle_is_capped_at_int32() -> None:
    _, frame, offset = build(ApiKey.Fetch, 12, populated=False)
    new = patched(ApiKey.Fetch, 12, frame, offset, 2**40)
    assert new is not None and decode_body(ApiKey.Fetch, 12, new, offset).throttle_time_ms == 2**31 - 1


def test_truncated_response_is_a_protocol_error() -> None:
    _, frame, offset = build(ApiKey.Produce, 9, populated=True)  # walked
    with pytest.raises(ProtocolError):
        throttle_patch_parts(ApiKey.Produce, 9, (frame[: len(frame) - 3],), offset, 1000)
    _, frame, offset = build(ApiKey.Fetch, 12, populated=False)  # first
    with pytest.raises(ProtocolError):
        throttle_patch_parts(ApiKey.Fetch, 12, (frame[: offset + 2],), offset, 1000)


# An ApiVersions error answer is in v0 layout (no throttle field) whatever version was asked.
RECORDED = [r for r in recorded_frames() if throttle_field_kind(r[1], r[2]) != "none" and r[3][8:10] == b"\x00\x00"]


@pytest.mark.parametrize("name", [r[0] for r in RECORDED])
def test_recorded_upstream_frames(name: str) -> None:
    ((_, api_key, version, frame),) = [r for r in RECORDED if r[0] == name]
    offset = response_body_offset(api_key, version, frame)
    assert patched(api_key, version, frame, offset, 0) is None  # the upstream sent 0
    new = patched(api_key, version, frame, offset, 1234)
    assert new is not None and len(new) == len(frame)
    assert decode_body(api_key, version, new, offset).throttle_time_ms == 1234
    assert patched(api_key, version, memoryview(new), offset, 1234) is None
