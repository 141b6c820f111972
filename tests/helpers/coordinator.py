"""FindCoordinator and ApiVersions asked by hand, with kafka-python's message classes, over one socket.

Real clients would hide a leaked coordinator address: a consumer told to use the upstream's own
address simply connects there and the round trip still succeeds, bypassing kqp and its quotas.
Asking FindCoordinator directly, at every version kqp offers, makes such a leak visible. Encoding
uses kafka-python, not kqp's codec, so a bug mirrored in kqp's encoder and decoder cannot hide.
"""

from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from .net import split_host_port

API_VERSIONS, FIND_COORDINATOR = 18, 10
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
    """api key -> (min, max) from an ApiVersions v0 request (the one layout every broker answers)."""
    request = struct.pack(">hhih", API_VERSIONS, 0, 1, 3) + b"raw"
    with socket.create_connection(split_host_port(bootstrap), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        payload = _read_frame(sock)
    correlation_id, error_code, count = struct.unpack_from(">ihi", payload, 0)
    assert (correlation_id, error_code) == (1, 0), f"ApiVersions v0 failed: error {error_code}"
    entries = (struct.unpack_from(">hhh", payload, 10 + 6 * i) for i in range(count))
    return {api: (low, high) for api, low, high in entries}


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
