"""FindCoordinator and ApiVersions asked by hand over one socket.

Real clients would hide a leaked coordinator address: a consumer told to use the upstream's own
address simply connects there and the round trip still succeeds, bypassing kqp and its quotas.
Asking FindCoordinator directly, at every version kqp offers, makes such a leak visible. Its
encoding uses kafka-python, not kqp's codec, so a bug mirrored in kqp's encoder and decoder cannot
hide. The versions kqp offers are read with kqp's own ApiVersions probe, the one kqp asks its
upstreams with (kqp's answer itself is checked against kafka-python in tests/protocol).
"""

from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from kqp.protocol.api_versions import ApiVersionsProbe
from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request

from .net import split_host_port

GROUP, TRANSACTION = 0, 1  # FindCoordinator key_type


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {count} bytes")
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def advertised_versions(bootstrap: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) that `bootstrap` advertises, asked as kqp asks its upstreams."""
    probe, correlation_id = ApiVersionsProbe(), 0
    with socket.create_connection(split_host_port(bootstrap), timeout=timeout) as sock:
        while probe.ranges is None:
            correlation_id += 1
            sock.sendall(encode_request(ApiKey.ApiVersions, probe.version, correlation_id, "raw",
                                        **probe.request_fields))
            payload = _read_frame(sock)
            probe = probe.answered(memoryview(struct.pack(">i", len(payload)) + payload))
    return dict(probe.ranges)


def find_coordinator(bootstrap: str, key: str, key_type: int, version: int,
                     timeout: float = 15.0) -> tuple[int, str, int]:
    """(error code, host, port) of the coordinator for `key`, asked at FindCoordinator `version`."""
    if version >= 4:  # v4+ batches keys (KIP-699)
        request = FindCoordinatorRequest(coordinator_keys=[key], key_type=key_type)
    else:
        request = FindCoordinatorRequest(key=key, **({"key_type": key_type} if version >= 1 else {}))
    request.with_header(correlation_id=11, client_id="kqp-coordinator-check")
    with socket.create_connection(split_host_port(bootstrap), timeout=timeout) as sock:
        sock.sendall(request.encode(version=version, header=True, framed=True))
        response = FindCoordinatorResponse.decode(_read_frame(sock), version=version, header=True)
    if version >= 4:
        (entry,) = response.coordinators
        return entry.error_code, entry.host, entry.port
    return response.error_code, response.host, response.port
