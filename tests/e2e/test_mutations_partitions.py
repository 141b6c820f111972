"""KIP-599 CreatePartitions through kqp, at the protocol level, against an upstream double.

No test upstream implements CreatePartitions (the mock cluster has no admin APIs, Tansu none of
this one), so kqp runs in front of `helpers.partitions_double.PartitionsDouble`, the smallest
upstream that speaks ApiVersions, Metadata and CreatePartitions. The client side is mostly raw
frames (kafka-python's message classes for the bodies, headers written here), so every byte kqp
sends and receives is under the test's eye: which topics reached the upstream, in which order, and
what came back. The last test drives kafka-python's KafkaAdminClient through the same setup.

The quota: controller_mutation_rate 5/s with 2 windows of 1 s, so the bucket holds B = 10 tokens
and refills at R = 5/s.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.net import split_host_port
from helpers.partitions_double import PartitionsDouble
from kafka.protocol.admin.topics import CreatePartitionsRequest, CreatePartitionsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

THROTTLING_QUOTA_EXCEEDED = 89
QUOTAS = {"window_size_seconds": 1, "window_count": 2,
          "entities": [{"client_id": "grower", "controller_mutation_rate": 5}]}
Topic = CreatePartitionsRequest.CreatePartitionsTopic


def request_frame(cls: type, version: int, correlation_id: int, client_id: str, **fields: Any) -> bytes:
    """A request frame as a client writes it: header v1 (v2 when the version is flexible) + body."""
    raw = client_id.encode()
    header = struct.pack(">hhih", cls.API_KEY, version, correlation_id, len(raw)) + raw
    if 0 <= cls._flexible_versions[0] <= version:
        header += b"\x00"                       # no tagged fields
    body = bytes(cls(**fields).encode(version=version))
    return struct.pack(">i", len(header) + len(body)) + header + body


class RawClient:
    def __init__(self, bootstrap: str) -> None:
        self.sock = socket.create_connection(split_host_port(bootstrap), timeout=20)

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))   # pipelined: all written before any answer is read

    def receive(self, cls: type, version: int) -> tuple[int, Any]:
        size = struct.unpack(">i", self._exact(4))[0]
        frame = self._exact(size)
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        offset = 5 if 0 <= cls._flexible_versions[0] <= version else 4
        return correlation_id, cls.decode(frame[offset:], version=version)

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "kqp closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def double() -> Iterator[PartitionsDouble]:
    with PartitionsDouble({f"g{i}": 2 for i in range(4)}) as upstream:
        yield upstream


def grow(version: int, correlation_id: int, targets: dict[str, int], client_id: str = "grower") -> bytes:
    return request_frame(CreatePartitionsRequest, version, correlation_id, client_id, timeout_ms=5000,
                         validate_only=False,
                         topics=[Topic(name=n, count=c, assignments=None) for n, c in targets.items()])


def test_strict_create_partitions_split_merged_and_retried(double: PartitionsDouble, kqp) -> None:
    proxy = kqp(double.bootstrap, QUOTAS)
    client = RawClient(proxy.bootstrap)
    try:
        # kqp has not seen these topics: it must look their partition counts up before it can
        # decide, and must not forward the pipelined Metadata request meanwhile.
        started = time.monotonic()
        client.send(grow(3, 1, {f"g{i}": 6 for i in range(4)}),
                    request_frame(MetadataRequest, 9, 2, "grower", topics=[
                        MetadataRequest.MetadataRequestTopic(name="g0")], allow_auto_topic_creation=False))
        correlation_id, answer = client.receive(CreatePartitionsResponse, 3)
        assert correlation_id == 1
        # Each grows 2 -> 6 partitions, costing 4: tokens 10 -> 6 -> 2 -> -2, so g3 meets K = -2
        # and is rejected with throttle -K/R = 2 / 5 = 0.4 s.
        assert [(r.name, r.error_code) for r in answer.results] == \
            [("g0", 0), ("g1", 0), ("g2", 0), ("g3", THROTTLING_QUOTA_EXCEEDED)]
        assert 300 <= answer.throttle_time_ms <= 400
        correlation_id, metadata = client.receive(MetadataResponse, 9)
        assert correlation_id == 2 and len(metadata.topics[0].partitions) == 6
        # The connection was muted for the throttle as soon as the rejection was known, so the
        # pipelined Metadata, and the retry of g3 sent now, are read only once the bucket is back
        # at 0: the retry is admitted.
        client.send(grow(3, 3, {"g3": 6}))
        correlation_id, answer = client.receive(CreatePartitionsResponse, 3)
        assert correlation_id == 3 and [(r.name, r.error_code) for r in answer.results] == [("g3", 0)]
        assert time.monotonic() - started >= 0.35
    finally:
        client.close()

    assert double.topics == {f"g{i}": 6 for i in range(4)}
    # Upstream view: one all-topics lookup by kqp (client id "kqp"), then the split request with
    # the admitted topics only, then the client's Metadata on that same connection, then the retry.
    lookups = [s for s in double.requests(ApiKey.Metadata) if s.client_id == "kqp" and s.topics is None]
    assert len(lookups) == 1
    grows = double.requests(ApiKey.CreatePartitions)
    assert [s.topics for s in grows] == [("g0", "g1", "g2"), ("g3",)]
    session = [s for s in double.seen if s.connection == grows[0].connection]
    assert [(s.api_key, s.topics) for s in session] == \
        [(ApiKey.CreatePartitions, ("g0", "g1", "g2")), (ApiKey.Metadata, ("g0",)), (ApiKey.CreatePartitions, ("g3",))]


def test_all_rejected_is_answered_by_kqp_alone(double: PartitionsDouble, kqp) -> None:
    proxy = kqp(double.bootstrap, QUOTAS)
    client = RawClient(proxy.bootstrap)
    try:
        # g0 2 -> 14 costs 12: admitted at K = 10, K = -2. g1 in the same request: rejected.
        client.send(grow(3, 1, {"g0": 14}), grow(3, 2, {"g1": 3}))
        _, first = client.receive(CreatePartitionsResponse, 3)
        assert [(r.name, r.error_code) for r in first.results] == [("g0", 0)] and first.throttle_time_ms == 0
        correlation_id, second = client.receive(CreatePartitionsResponse, 3)
        assert correlation_id == 2
        assert [(r.name, r.error_code) for r in second.results] == [("g1", THROTTLING_QUOTA_EXCEEDED)]
        assert second.results[0].error_message == "The throttling quota has been exceeded."
        assert 300 <= second.throttle_time_ms <= 400
    finally:
        client.close()
    assert [s.topics for s in double.requests(ApiKey.CreatePartitions)] == [("g0",)]   # g1 never went upstream
    assert double.topics["g1"] == 2


def test_old_version_is_admitted_whole_and_throttled(double: PartitionsDouble, kqp) -> None:
    proxy = kqp(double.bootstrap, QUOTAS)
    client = RawClient(proxy.bootstrap)
    try:
        # CreatePartitions v1 knows no error 89: all four (16 mutations) are admitted, K = -6,
        # and the response carries throttle -K/R = 1.2 s (v1 honours client-side throttling).
        client.send(grow(1, 1, {f"g{i}": 6 for i in range(4)}))
        _, answer = client.receive(CreatePartitionsResponse, 1)
        assert [r.error_code for r in answer.results] == [0, 0, 0, 0]
        assert 1000 <= answer.throttle_time_ms <= 1200
        # Once that throttle has passed, as a v1 client waits it out (K back above 0; read at the very
        # end of the mute, K could be a rounding below it), a validate_only request is admitted and
        # goes upstream untouched.
        time.sleep(answer.throttle_time_ms / 1000 + 0.05)
        client.send(request_frame(CreatePartitionsRequest, 3, 2, "grower", timeout_ms=5000, validate_only=True,
                                  topics=[Topic(name="g0", count=50, assignments=None)]))
        _, validated = client.receive(CreatePartitionsResponse, 3)
        assert [(r.name, r.error_code) for r in validated.results] == [("g0", 0)]
    finally:
        client.close()
    assert double.topics == {f"g{i}": 6 for i in range(4)}


def test_kafka_python_admin_grows_past_the_quota(double: PartitionsDouble, kqp) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NodeNotReadyError

    proxy = kqp(double.bootstrap, QUOTAS)
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="grower", request_timeout_ms=10_000)
    codes: list[dict[str, int]] = []
    pending = {f"g{i}": 6 for i in range(4)}
    deadline = time.monotonic() + 20
    try:
        while pending and time.monotonic() < deadline:
            try:
                response = admin.create_partitions(pending, raise_errors=False)
            except NodeNotReadyError:      # kafka-python pausing itself for throttle_time_ms
                time.sleep(0.05)
                continue
            codes.append({r.name: r.error_code for r in response.results})
            pending = {n: c for n, c in pending.items() if codes[-1].get(n) == THROTTLING_QUOTA_EXCEEDED}
    finally:
        admin.close()
    # 4 x 4 mutations against B = 10: g3 is rejected (K = -2) the first time, admitted on retry.
    assert codes[0] == {"g0": 0, "g1": 0, "g2": 0, "g3": THROTTLING_QUOTA_EXCEEDED}
    assert codes[-1] == {"g3": 0} and not pending
    assert double.topics == {f"g{i}": 6 for i in range(4)}
