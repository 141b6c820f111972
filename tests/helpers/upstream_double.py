"""What every small upstream double in tests/ shares: a threaded TCP server on a free loopback port,
used as a context manager, and reading whole Kafka frames off a blocking socket.

A double speaks only the API a test needs that neither test upstream serves (CreatePartitions,
SASL passthrough); a subclass implements `serve(sock, connection)` for one client connection.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import struct
import threading

LOOPBACK = "127.0.0.1"


def read_exact(sock: socket.socket, n: int) -> bytes | None:
    """`n` bytes, or None when the peer closes (or the socket fails) first."""
    chunks = []
    while n:
        try:
            chunk = sock.recv(n)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes | None:
    """One whole frame, size prefix included, or None when the peer closes first."""
    head = read_exact(sock, 4)
    if head is None:
        return None
    body = read_exact(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


class UpstreamDouble:
    """A server on 127.0.0.1:`port`, one thread per connection, stopped on leaving the `with`."""

    name = "upstream-double"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        double = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                double.serve(self.request, next(double._ids))

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.name, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def serve(self, sock: socket.socket, connection: int) -> None:
        raise NotImplementedError

    def __enter__(self) -> UpstreamDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
