"""Raw frames kqp forwards on their header alone, through `kqp run` to librdkafka's mock cluster.

The mock advertises ListOffsets v0-v7 and GetTelemetrySubscriptions v0 (KIP-714). kqp has no
layout for ListOffsets v0 (Kafka 4 dropped it from the schemas kafka-python ships) nor any for
GetTelemetrySubscriptions (kafka-python has no schema for it): both are advertised and go through
on their header alone, and the client gets exactly the bytes the broker answers directly. The
mock's ShareFetch (it names brokers) is advertised only at the versions kqp reads and rewrites
(v1-v2, kqp's own definition), never its early-access v0; its ConsumerGroupHeartbeat v1 (KIP-848 as
released, passed on its header alone) is. Produce v0-v10 and Fetch v0-v16 are, old versions included.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.names import unique_topic
from helpers.net import split_host_port
from helpers.observability import metrics_url, sample, scrape
from helpers.quota_frames import read_responses
from helpers.quota_path import quota_upstream
from helpers.topics import ensure_topic
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0
from upstreams.launch import Upstream

from kqp.protocol.api_versions import decode_api_versions_response
from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

CLIENT_ID = "header-only"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("header-only")) as bootstrap:
        yield bootstrap


def frame(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool = False) -> bytes:
    raw_id = CLIENT_ID.encode()
    head = struct.pack(">hhih", api_key, version, correlation_id, len(raw_id)) + raw_id
    head += b"\x00" if flexible else b""
    return struct.pack(">i", len(head) + len(body)) + head + body


def exchange(address: str, frames: list[bytes]) -> list[bytes]:
    """Send `frames` pipelined on one connection; their response frames, size prefix included."""
    with socket.create_connection(split_host_port(address), timeout=10) as sock:
        sock.sendall(b"".join(frames))
        return [struct.pack(">i", len(body)) + body for _, body in read_responses(sock, len(frames), timeout=15)]


def test_header_only_requests_go_through_untouched(kqp: Any, upstream: Upstream) -> None:
    if upstream.kind != "mock":
        pytest.skip("the advertised ranges asserted here are the mock's")
    proxy = kqp(str(upstream), {"entities": [{"client_id": CLIENT_ID, "request_rate": 1000}]},
                metrics={"listen": "127.0.0.1:0"})
    topic = unique_topic("header-only")
    ensure_topic(str(upstream), topic, 1, upstream_kind=upstream.kind)

    [answer] = exchange(proxy.bootstrap, [frame(ApiKey.ApiVersions, 0, 1, b"")])
    error, advertised = decode_api_versions_response(memoryview(answer), 0)
    assert error == 0
    assert advertised[ApiKey.Produce] == (0, 10) and advertised[ApiKey.Fetch] == (0, 16)
    assert advertised[ApiKey.ListOffsets] == (0, 7) and advertised[ApiKey.GetTelemetrySubscriptions] == (0, 0)
    share_fetch = advertised.get(ApiKey.ShareFetch, (1, 1))
    assert 1 <= share_fetch[0] <= share_fetch[1] <= 2 and advertised[ApiKey.ConsumerGroupHeartbeat] == (1, 1)

    requests = [
        frame(ApiKey.ListOffsets, 0, 2, ListOffsetsRequest_v0(-1, [(topic, [(0, -1, 1)])]).encode()),
        frame(ApiKey.GetTelemetrySubscriptions, 0, 3, uuid.UUID(int=7).bytes + b"\x00", flexible=True),
    ]
    through_kqp = exchange(proxy.bootstrap, requests)
    direct = exchange(str(upstream), requests)
    assert through_kqp == direct, "a header-only response must reach the client as the broker sent it"

    samples = scrape(metrics_url(proxy))
    for api in ("ListOffsets", "GetTelemetrySubscriptions"):
        assert sample(samples, "kqp_requests_total", api=api, user="ANONYMOUS", client_id=CLIENT_ID) == 1
    for kind in ("unawaited", "unreadable"):
        assert not sample(samples, "kqp_upstream_anomalies_total", kind=kind)
