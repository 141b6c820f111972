"""The skip walker agrees with kafka-python on every request and response at every version."""

from __future__ import annotations

import pytest
from codec_support import sample_message

from kqp.protocol.apis import kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.walker import read_uvarint, skip_tagged_fields, walker_for, write_uvarint

CASES = [(k, side, v) for k, (lo, hi) in kqp_ranges().items() for side in (0, 1) for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("api_key", "side", "version"), CASES)
def test_walk_ends_where_the_message_ends(api_key: int, side: int, version: int) -> None:
    cls = message_classes(api_key)[side]
    message = sample_message(cls, version)
    body = memoryview(message.encode(version=version))
    walker = walker_for(cls, version)
    bounds = walker.boundaries(body, 0)
    end = skip_tagged_fields(body, bounds[-1]) if walker.flexible else bounds[-1]
    assert end == len(body)
    assert cls.decode(body, version=version) == message
    # every untagged field starts where re-encoding the fields before it would put it
    assert bounds == sorted(bounds) and len(bounds) == len(walker.names) + 1
    if len(body) > 1:
        with pytest.raises(ProtocolError):
            full = walker.boundaries(body[: bounds[-1] - 1], 0)
            if walker.flexible:
                skip_tagged_fields(body[: bounds[-1] - 1], full[-1])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**28, 2**32 - 1])
def test_uvarint_round_trip(value: int) -> None:
    encoded = write_uvarint(value)
    assert read_uvarint(encoded + b"\xff", 0) == (value, len(encoded))


def test_overlong_uvarint_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        read_uvarint(b"\xff" * 6, 0)


def test_impossible_array_count_is_rejected_without_looping() -> None:
    from kafka.protocol.metadata import MetadataResponse

    walker = walker_for(MetadataResponse, 1)
    body = b"\x7f\xff\xff\xff"  # brokers: 2**31-1 elements in 0 bytes
    with pytest.raises(ProtocolError):
        walker.boundaries(memoryview(body), 0)
