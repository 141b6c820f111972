"""Corrupted upstream responses: the response-side codec raises ProtocolError and nothing else."""

from __future__ import annotations

import pytest
from codec_support import response_frame, sample_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqp.protocol.addresses import rewrite_addresses, rewrite_addresses_parts
from kqp.protocol.api_versions import ApiVersionsProbe, encode_api_versions_response
from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_body_offset
from kqp.protocol.throttle_field import throttle_patch_parts

CASES = [(ApiKey.Metadata, 1), (ApiKey.Metadata, 12), (ApiKey.FindCoordinator, 2), (ApiKey.FindCoordinator, 6),
         (ApiKey.DescribeCluster, 1), (ApiKey.DescribeQuorum, 2), (ApiKey.Produce, 11), (ApiKey.Fetch, 17)]
FRAMES = {c: bytes(response_frame(c[0], c[1], sample_message(message_classes(c[0])[1], c[1]))) for c in CASES}


def corrupt(data: bytes, cut: int, flips: list[tuple[int, int]]) -> memoryview:
    buf = bytearray(data[: max(8, len(data) - cut)])
    for pos, value in flips:
        buf[8 + pos % (len(buf) - 8) if len(buf) > 8 else 0] = value
    return memoryview(bytes(buf))


MUTATIONS = dict(
    case=st.sampled_from(CASES),
    cut=st.integers(min_value=0, max_value=40),
    part=st.integers(min_value=1, max_value=64),
    flips=st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)), max_size=4),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MUTATIONS)
def test_rewrite_and_patch_raise_only_protocol_errors(case, cut, part, flips) -> None:
    api_key, version = case
    frame = corrupt(FRAMES[case], cut, flips)
    split = tuple(frame[i : i + part] for i in range(0, len(frame), part))  # as reads of `part` bytes
    for call in (
        lambda offset: rewrite_addresses(api_key, version, frame, offset, lambda n, h, p: ("kqp", 1)),
        lambda offset: rewrite_addresses_parts(api_key, version, split, offset, lambda n, h, p: ("kqp", 1)),
        lambda offset: throttle_patch_parts(api_key, version, (frame,), offset, 10),
        lambda offset: throttle_patch_parts(api_key, version, split, offset, 10),
    ):
        try:
            call(response_body_offset(api_key, version, frame))
        except ProtocolError:
            pass


def test_an_api_versions_answer_with_a_null_array_is_a_protocol_error() -> None:
    # Found by the fuzzing below: v3, error 0, api_keys a null compact array (length varint 0).
    frame = bytes.fromhex("0000001a000000010000000000000300")
    with pytest.raises(ProtocolError, match="null api_keys"):
        ApiVersionsProbe(3).answered(memoryview(frame))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 4), cut=st.integers(0, 30), flips=MUTATIONS["flips"])
def test_api_versions_probe_raises_only_protocol_errors(version, cut, flips) -> None:
    frame = corrupt(encode_api_versions_response(version, 1, {ApiKey.Produce: (3, 9), ApiKey.ApiVersions: (0, 4)}),
                    cut, flips)
    try:
        step = ApiVersionsProbe(version).answered(frame)
    except ProtocolError:
        return
    # either done with ranges at the version asked, or a retry strictly lower
    if step.ranges is None:
        assert 0 <= step.version < version
    else:
        assert step.version == version and all(isinstance(r, tuple) for r in step.ranges.values())
