"""Probing kqp's connection limits with raw sockets from chosen loopback addresses.

Linux routes all of 127/8 to lo, so a socket bound to 127.0.0.2, 127.0.0.3, ... is another client
IP to kqp's per-IP limits. `served` asks an ApiVersions v0 and reads its answer; `refused` expects
kqp to close the socket without one; `closed_total` reads `kqp_connections_closed_total{reason}`.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

from kqp.protocol.apis import ApiKey

from .net import read_until_eof, split_host_port
from .observability import sample, scrape

CLOSE_WITHIN = 5.0
API_VERSIONS = struct.pack(">i", 12) + struct.pack(">hhih", ApiKey.ApiVersions, 0, 7, 2) + b"ab"


def connect_from(ip: str, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(CLOSE_WITHIN)
    sock.bind((ip, 0))
    sock.connect(split_host_port(address))
    return sock


def served(sock: socket.socket) -> bool:
    """kqp answers an ApiVersions v0 on this socket (correlation id 7)."""
    sock.sendall(API_VERSIONS)
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        if not chunk:
            return False
        head += chunk
    size, correlation_id = struct.unpack(">ii", head)
    remaining = size - 4
    while remaining:
        remaining -= len(sock.recv(min(remaining, 65536)))
    return correlation_id == 7


def refused(sock: socket.socket) -> float:
    """The socket is closed by kqp without an answer; returns how long that took."""
    started = time.monotonic()
    # kqp may have closed already on what came before (a malformed PROXY header): the send then meets
    # its reset, a refusal too, and the read below sees the close.
    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
        sock.sendall(API_VERSIONS)
    data, closed = read_until_eof(sock, CLOSE_WITHIN)
    assert closed and data == b"", f"expected a refusal, got {data!r} (closed: {closed})"
    return time.monotonic() - started


def closed_total(url: str, reason: str) -> float:
    return sample(scrape(url), "kqp_connections_closed_total", reason=reason) or 0.0
