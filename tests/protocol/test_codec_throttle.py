"""throttle_time_ms read and raised for every (api, version) kqp decodes, checked with kafka-python."""

from __future__ import annotations

import pytest
from codec_support import decode_body, recorded_frames, response_frame, sample_message

from kqp.protocol.apis import kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_body_offset
from kqp.protocol.throttle import (
    patch_throttle_ms,
    read_throttle_ms,
    throttle_field_kind,
    throttle_patch_parts,
)

ALL = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)]
WITH_FIELD = [(k, v) for k, v in ALL if throttle_field_kind(k, v) != "none"]


def build(api_key: int, version: int, populated: bool) -> tuple[object, memoryview, int]:
    cls = message_classes(api_key)[1]
    message = sample_message(cls, version) if populated else cls(version=version, throttle_time_ms=100)
    frame = response_frame(api_key, version, message)
    return message, frame, response_body_offset(api_key, version, frame)


def test_kinds_are_derived_from_field_order() -> None:
    assert throttle_field_kind(1, 12) == "first"  # Fetch: throttle_time_ms leads
    assert throttle_field_kind(0, 9) == "walk"  # Produce: after the responses array
    assert throttle_field_kind(18, 3) == "walk"  # ApiVersions: after the api keys
    assert throttle_field_kind(47, 0) == "walk"  # OffsetDelete: after error_code
    assert throttle_field_kind(18, 0) == "none"
    assert [throttle_field_kind(3, v) for v in (2, 3)] == ["none", "first"]  # Metadata from v3
    assert throttle_field_kind(17, 1) == "none"  # SaslHandshake never had one
    assert throttle_field_kind(4, 0) == "none"  # unknown api: nothing to patch
    assert len(WITH_FIELD) > 200


@pytest.mark.parametrize(("api_key", "version"), WITH_FIELD)
@pytest.mark.parametrize("populated", [False, True], ids=["defaults", "populated"])
def test_patch_raises_throttle_and_keeps_everything_else(api_key: int, version: int, populated: bool) -> None:
    message, frame, offset = build(api_key, version, populated)
    assert read_throttle_ms(api_key, version, frame, offset) == 100
    patched = patch_throttle_ms(api_key, version, frame, offset, 2500)
    assert len(patched) == len(frame) and bytes(patched[:offset]) == bytes(frame[:offset])
    decoded = decode_body(api_key, version, patched, offset)
    assert decoded.throttle_time_ms == 2500
    decoded.throttle_time_ms = 100
    assert decoded == message  # every other field intact
    head, tail = throttle_patch_parts(api_key, version, frame, offset, 2500)
    assert head + tail == bytes(patched) and tail.obj is frame.obj  # the tail is not copied


@pytest.mark.parametrize(("api_key", "version"), WITH_FIELD)
def test_lower_or_equal_throttle_changes_nothing(api_key: int, version: int) -> None:
    _, frame, offset = build(api_key, version, populated=False)
    for lower in (100, 5, 0):
        assert patch_throttle_ms(api_key, version, frame, offset, lower) is frame
        assert throttle_patch_parts(api_key, version, frame, offset, lower) is None


@pytest.mark.parametrize(("api_key", "version"), [(k, v) for k, v in ALL if throttle_field_kind(k, v) == "none"])
def test_versions_without_a_field_pass_through(api_key: int, version: int) -> None:
    _, frame, offset = build(api_key, version, populated=True)
    assert read_throttle_ms(api_key, version, frame, offset) is None
    assert patch_throttle_ms(api_key, version, frame, offset, 1000) is frame


def test_throttle_is_capped_at_int32() -> None:
    _, frame, offset = build(1, 12, populated=False)
    patched = patch_throttle_ms(1, 12, frame, offset, 2**40)
    assert decode_body(1, 12, patched, offset).throttle_time_ms == 2**31 - 1


def test_truncated_response_is_a_protocol_error() -> None:
    _, frame, offset = build(0, 9, populated=True)  # Produce: walked
    with pytest.raises(ProtocolError):
        read_throttle_ms(0, 9, frame[: len(frame) - 3], offset)
    _, frame, offset = build(1, 12, populated=False)
    with pytest.raises(ProtocolError):
        read_throttle_ms(1, 12, frame[: offset + 2], offset)


# An ApiVersions error answer is in v0 layout (no throttle field) whatever version was asked.
RECORDED = [r for r in recorded_frames() if throttle_field_kind(r[1], r[2]) != "none" and r[3][8:10] == b"\x00\x00"]


@pytest.mark.parametrize("name", [r[0] for r in RECORDED])
def test_recorded_upstream_frames(name: str) -> None:
    ((_, api_key, version, frame),) = [r for r in RECORDED if r[0] == name]
    offset = response_body_offset(api_key, version, frame)
    assert read_throttle_ms(api_key, version, frame, offset) == 0
    patched = patch_throttle_ms(api_key, version, frame, offset, 1234)
    assert read_throttle_ms(api_key, version, memoryview(patched), offset) == 1234
    assert len(patched) == len(frame)
