"""kqp's upstream handshake against the live test upstreams: ApiVersions (with the retry the mock
cluster needs) then Metadata, all encoded and decoded by kqp.protocol. The upstreams come from the
suite's session fixtures (tests/conftest.py), which start and stop them, or a real cluster when
KQP_TEST_BOOTSTRAP is set."""

from __future__ import annotations

import socket

import pytest

from kqp.protocol.api_versions import (
    UPSTREAM_REQUEST_VERSION,
    api_versions_retry_version,
    decode_api_versions_response,
    intersect_ranges,
)
from kqp.protocol.apis import kqp_ranges
from kqp.protocol.frames import FrameDecoder
from kqp.protocol.headers import response_correlation_id
from kqp.protocol.messages import encode_request, metadata_brokers

pytestmark = pytest.mark.e2e


def rpc(addr: tuple[str, int], frame: bytes) -> memoryview:
    decoder = FrameDecoder(1 << 20)
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(frame)
        for _ in range(1000):  # bounded
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("upstream closed")
            decoder.feed(chunk)
            response = decoder.next_frame()
            if response is not None:
                return response
    raise AssertionError("no response")


def handshake(addr: tuple[str, int]) -> tuple[dict[int, tuple[int, int]], list]:
    version, correlation_id = UPSTREAM_REQUEST_VERSION, 1
    for _ in range(3):
        fields = {"client_software_name": "kqp", "client_software_version": "0"} if version >= 3 else {}
        response = rpc(addr, encode_request(18, version, correlation_id, "kqp", **fields))
        assert response_correlation_id(response) == correlation_id
        error, ranges = decode_api_versions_response(response, version)
        retry = api_versions_retry_version(error, ranges, version)
        if retry is None:
            break
        version, correlation_id = retry, correlation_id + 1
    assert error == 0
    usable = intersect_ranges(ranges, kqp_ranges())
    md_version = usable[3][1]
    response = rpc(addr, encode_request(3, md_version, 9, "kqp", topics=None))
    return usable, metadata_brokers(response, md_version)


def test_mock_cluster_handshake(mock_cluster) -> None:
    usable, brokers = handshake(mock_cluster.addresses[0])
    assert 0 in usable and 1 in usable and 3 in usable and brokers
    if mock_cluster.kind == "mock":
        assert usable[18] == (0, 2)  # learnt through the UNSUPPORTED_VERSION retry
        assert sorted(b.node_id for b in brokers) == [1, 2, 3]
        assert {(b.host, b.port) for b in brokers} == set(mock_cluster.addresses)


def test_tansu_handshake(tansu) -> None:
    usable, brokers = handshake(tansu.addresses[0])
    assert 0 in usable and 1 in usable and 3 in usable and brokers
    if tansu.kind == "tansu":
        assert usable[18] == (0, 4)
        assert [(b.node_id, b.host, b.port) for b in brokers] == [(111, *tansu.addresses[0])]
