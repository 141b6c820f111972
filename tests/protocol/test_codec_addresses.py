"""Broker address rewriting for every api and version that carries one, and the recorded frames."""

from __future__ import annotations

import pytest
from codec_support import UPSTREAM_HOST, decode_body, recorded_frames, response_frame, sample_message

from kqp.protocol.addresses import BrokerAddress, may_carry_addresses, rewrite_addresses
from kqp.protocol.apis import kqp_ranges, message_classes
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_body_offset
from kqp.protocol.messages import metadata_brokers
from kqp.protocol.walker import skip_tagged_fields, walker_for

ALL = [(k, v) for k, (lo, hi) in kqp_ranges().items() for v in range(lo, hi + 1)]
CARRIERS = [(k, v) for k, v in ALL if may_carry_addresses(k, v)]


def to_kqp(node_id: int, host: str, port: int) -> tuple[str, int]:
    return f"kqp-{node_id}.local", port + 10000


def back_upstream(node_id: int, host: str, port: int) -> tuple[str, int]:
    assert host == f"kqp-{node_id}.local"
    return UPSTREAM_HOST, port - 10000


def test_carriers_are_exactly_the_apis_with_endpoints() -> None:
    def versions(key: int) -> set[int]:
        return {v for k, v in CARRIERS if k == key}

    assert {k for k, _ in CARRIERS} == {0, 1, 3, 10, 55, 60, 78, 79}
    assert versions(3) == set(range(kqp_ranges()[3][0], kqp_ranges()[3][1] + 1))  # Metadata: all
    assert versions(10) == set(range(0, kqp_ranges()[10][1] + 1))  # FindCoordinator: all
    assert min(versions(0)) == 10 and min(versions(1)) == 16 and versions(55) == {2}  # tagged / listeners
    assert versions(78) == versions(79) == {1, 2}  # ShareFetch, ShareAcknowledge: NodeEndpoints, untagged
    assert not may_carry_addresses(15, 5)  # DescribeGroups client_host is a client's, not a broker's
    assert not may_carry_addresses(29, 3)  # ACL host patterns neither


@pytest.mark.parametrize(("api_key", "version"), CARRIERS)
def test_every_endpoint_is_rewritten_and_nothing_else_moves(api_key: int, version: int) -> None:
    message = sample_message(message_classes(api_key)[1], version)
    frame = response_frame(api_key, version, message)
    offset = response_body_offset(api_key, version, frame)
    assert UPSTREAM_HOST.encode() in frame.obj

    new, seen = rewrite_addresses(api_key, version, frame, offset, to_kqp)
    assert new is not None and seen
    assert all(b.host == UPSTREAM_HOST and b.node_id > 0 for b in seen)
    assert UPSTREAM_HOST.encode() not in new  # no upstream host left anywhere
    assert int.from_bytes(new[:4], "big") == len(new) - 4  # re-sized frame
    assert new[4:offset] == frame[4:offset]  # header (correlation id) untouched
    decoded = decode_body(api_key, version, new, offset)
    text = repr(decoded)
    for b in seen:
        assert f"kqp-{b.node_id}.local" in text and str(b.port + 10000) in text

    # mapping back restores the upstream's exact bytes: every other field survived intact
    restored, seen_again = rewrite_addresses(api_key, version, memoryview(new), offset, back_upstream)
    assert restored == bytes(frame)
    assert [(b.node_id, b.port - 10000) for b in seen_again] == [(b.node_id, b.port) for b in seen]


@pytest.mark.parametrize(("api_key", "version"), CARRIERS)
def test_identity_mapping_returns_none_but_reports_brokers(api_key: int, version: int) -> None:
    message = sample_message(message_classes(api_key)[1], version)
    frame = response_frame(api_key, version, message)
    offset = response_body_offset(api_key, version, frame)
    new, seen = rewrite_addresses(api_key, version, frame, offset, lambda n, h, p: (h, p))
    assert new is None and seen


@pytest.mark.parametrize(("api_key", "version"), [(0, 13), (1, 16), (1, 18), (78, 1), (78, 2)])
def test_produce_and_fetch_without_node_endpoints_are_not_copied(api_key: int, version: int) -> None:
    message = sample_message(message_classes(api_key)[1], version)
    message.node_endpoints = []  # the default: no tag on the wire
    message.tags = None
    frame = response_frame(api_key, version, message)
    offset = response_body_offset(api_key, version, frame)
    assert rewrite_addresses(api_key, version, frame, offset, to_kqp) == (None, [])


def test_fetch_record_data_survives_a_rewrite() -> None:
    message = sample_message(message_classes(1)[1], 17)
    records = [p.records for t in message.responses for p in t.partitions]
    frame = response_frame(1, 17, message)
    new, _ = rewrite_addresses(1, 17, frame, 9, to_kqp)
    decoded = decode_body(1, 17, new, 9)
    assert [p.records for t in decoded.responses for p in t.partitions] == records


def test_failed_coordinators_are_left_alone() -> None:
    cls = message_classes(10)[1]
    coordinator = cls.Coordinator
    message = cls(
        version=4,
        throttle_time_ms=0,
        coordinators=[
            coordinator(version=4, key="g1", node_id=-1, host="", port=-1, error_code=15, error_message="x"),
            coordinator(version=4, key="g2", node_id=2, host="up", port=9092, error_code=0),
            coordinator(version=4, key="g3", node_id=3, host="up", port=9093, error_code=14),
        ],
    )
    frame = response_frame(10, 4, message)
    new, seen = rewrite_addresses(10, 4, frame, 9, to_kqp)
    assert seen == [BrokerAddress(2, "up", 9092)]
    got = decode_body(10, 4, new, 9).coordinators
    assert [(c.host, c.port) for c in got] == [("", -1), ("kqp-2.local", 19092), ("up", 9093)]
    v0 = cls(version=0, error_code=15, node_id=-1, host="", port=-1)
    assert rewrite_addresses(10, 0, response_frame(10, 0, v0), 8, to_kqp) == (None, [])


def test_non_carriers_pass_through() -> None:
    frame = response_frame(15, 5, sample_message(message_classes(15)[1], 5))
    assert rewrite_addresses(15, 5, frame, 9, to_kqp) == (None, [])


def test_truncated_metadata_is_a_protocol_error() -> None:
    frame = response_frame(3, 12, sample_message(message_classes(3)[1], 12))
    with pytest.raises(ProtocolError):
        rewrite_addresses(3, 12, frame[:20], 9, to_kqp)
    frame = response_frame(10, 2, sample_message(message_classes(10)[1], 2))
    with pytest.raises(ProtocolError):
        rewrite_addresses(10, 2, frame[:-1], 8, to_kqp)


RECORDED = [r for r in recorded_frames() if may_carry_addresses(r[1], r[2]) and r[1] not in (0, 1)]
RECORDED_DATA = [r for r in recorded_frames() if r[1] in (0, 1)]


@pytest.mark.parametrize("name", [r[0] for r in RECORDED_DATA])
def test_recorded_produce_and_fetch_responses_walk_to_their_end(name: str) -> None:
    ((_, api_key, version, frame),) = [r for r in RECORDED_DATA if r[0] == name]
    offset = response_body_offset(api_key, version, frame)
    walker = walker_for(message_classes(api_key)[1], version)
    end = walker.tagged_start(frame, offset)
    if walker.flexible:
        end = skip_tagged_fields(frame, end)
    assert end == len(frame)  # the walk skipped the real record data by its length, exactly
    assert rewrite_addresses(api_key, version, frame, offset, to_kqp) == (None, [])  # no leader hints


@pytest.mark.parametrize("name", [r[0] for r in RECORDED])
def test_recorded_upstream_frames(name: str) -> None:
    ((_, api_key, version, frame),) = [r for r in RECORDED if r[0] == name]
    offset = response_body_offset(api_key, version, frame)
    new, seen = rewrite_addresses(api_key, version, frame, offset, to_kqp)
    assert seen and all(b.host == "127.0.0.1" and b.node_id >= 0 for b in seen)
    assert b"127.0.0.1" in frame.obj and b"127.0.0.1" not in new
    decoded = decode_body(api_key, version, new, offset)
    original = decode_body(api_key, version, frame, offset)
    if api_key == 3:
        expected = [to_kqp(b.node_id, b.host, b.port) for b in original.brokers]
        assert [(b.host, b.port) for b in decoded.brokers] == expected
        assert decoded.topics == original.topics  # spliced around, untouched
        assert metadata_brokers(frame, version) == seen
    restored, _ = rewrite_addresses(api_key, version, memoryview(new), offset, lambda n, h, p: ("127.0.0.1", p - 10000))
    assert restored == bytes(frame)


@pytest.mark.parametrize(("api_key", "version"), [(0, 10), (1, 16), (1, 17)])
def test_a_repeated_tag_section_is_rewritten_as_the_mapper_answers_now(api_key: int, version: int) -> None:
    """Produce v10+ and Fetch v16+ tag sections are kept by their bytes (Tansu names its brokers in
    every Fetch response); each response still asks the mapper for every endpoint, and a mapper that
    answers otherwise than it did gets its new answer."""
    frame = response_frame(api_key, version, sample_message(message_classes(api_key)[1], version))
    offset = response_body_offset(api_key, version, frame)
    asked: list[tuple[int, str, int]] = []

    def noting(node_id: int, host: str, port: int) -> tuple[str, int]:
        asked.append((node_id, host, port))
        return to_kqp(node_id, host, port)

    first, seen = rewrite_addresses(api_key, version, frame, offset, noting)
    asked.clear()
    again, seen_again = rewrite_addresses(api_key, version, frame, offset, noting)
    assert first is not None and again == first and seen_again == seen
    # Asked again, once per endpoint: the mapper also notes brokers kqp has no listener for yet.
    assert asked == [(b.node_id, b.host, b.port) for b in seen]

    moved, seen_moved = rewrite_addresses(api_key, version, frame, offset,
                                          lambda n, h, p: (f"moved-{n}.local", p + 20000))
    assert moved is not None and seen_moved == seen
    text = repr(decode_body(api_key, version, moved, offset))
    assert "kqp-" not in text and all(f"moved-{b.node_id}.local" in text for b in seen)
    assert rewrite_addresses(api_key, version, frame, offset, lambda n, h, p: (h, p)) == (None, seen)
