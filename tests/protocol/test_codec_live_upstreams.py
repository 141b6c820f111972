"""kqp's upstream handshake against the live test upstreams: ApiVersions (kqp's one probe, with the
fallback the mock cluster needs) then Metadata, all encoded and decoded by kqp.protocol. The upstreams come from the
suite's session fixtures (tests/conftest.py), which start and stop them, or a real cluster when
KQP_TEST_BOOTSTRAP is set."""

from __future__ import annotations

import socket

import pytest

from kqp.protocol.api_versions import ApiVersionsProbe, intersect_ranges
from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.frames import FrameReader
from kqp.protocol.headers import response_correlation_id
from kqp.protocol.messages import encode_request, metadata_brokers

pytestmark = pytest.mark.e2e


def rpc(addr: tuple[str, int], frame: bytes) -> memoryview:
    reader = FrameReader(1 << 20)
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(frame)
        for _ in range(1000):  # bounded
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("upstream closed")
            reader.received(chunk)
            response = reader.next_frame()
            if response is not None:
                return response
    raise AssertionError("no response")


def handshake(addr: tuple[str, int]) -> tuple[list[int], dict[int, tuple[int, int]], list]:
    """(ApiVersions versions asked, usable ranges, brokers), the way UpstreamCluster.refresh gets them."""
    probe, asked = ApiVersionsProbe(), []
    while probe.ranges is None:
        asked.append(probe.version)
        correlation_id = len(asked)
        response = rpc(addr, encode_request(ApiKey.ApiVersions, probe.version, correlation_id, "kqp",
                                            **probe.request_fields))
        assert response_correlation_id(response) == correlation_id
        probe = probe.answered(response)
    usable = intersect_ranges(probe.ranges, kqp_ranges())
    md_version = usable[ApiKey.Metadata][1]
    response = rpc(addr, encode_request(ApiKey.Metadata, md_version, 9, "kqp", topics=None))
    return asked, usable, metadata_brokers(response, md_version)


def test_mock_cluster_handshake(mock_cluster) -> None:
    asked, usable, brokers = handshake(mock_cluster.addresses[0])
    assert {ApiKey.Produce, ApiKey.Fetch, ApiKey.Metadata} <= usable.keys() and brokers
    if mock_cluster.kind == "mock":
        # v3 is answered UNSUPPORTED_VERSION in a layout that names no range: Kafka's rule, retry at v0
        assert asked == [3, 0]
        assert usable[ApiKey.ApiVersions] == (0, 2)
        assert sorted(b.node_id for b in brokers) == [1, 2, 3]
        assert {(b.host, b.port) for b in brokers} == set(mock_cluster.addresses)


def test_tansu_handshake(tansu) -> None:
    asked, usable, brokers = handshake(tansu.addresses[0])
    assert {ApiKey.Produce, ApiKey.Fetch, ApiKey.Metadata} <= usable.keys() and brokers
    if tansu.kind == "tansu":
        assert asked == [3]
        assert usable[ApiKey.ApiVersions] == (0, 4)
        assert [(b.node_id, b.host, b.port) for b in brokers] == [(111, *tansu.addresses[0])]
