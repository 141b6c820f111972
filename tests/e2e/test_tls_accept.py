"""A TLS listener out of file descriptors backs off and accepts again once some are free.

kqp accepts TLS sockets itself (`proxy/runtime/listeners.py`); when accept fails with EMFILE it
stops watching the listening socket for a moment, as asyncio's own servers do, and must then watch
it again: the backlog waits meanwhile. kqp runs here with 64 file descriptors and is flooded with
bare TCP connections that never start a handshake, until it logs the failure; once they are gone
a real TLS client is served.
"""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.net import split_host_port
from helpers.tls import TlsFiles

from .test_tls_clients import api_versions_over, tls_socket

pytestmark = pytest.mark.e2e

OPEN_FILES = 64
FLOOD = 150          # well past OPEN_FILES: accept must fail


def test_a_tls_listener_out_of_descriptors_backs_off_and_serves_again(mock_cluster: str, kqp: Any,
                                                                        tmp_path: Path) -> None:
    certs = TlsFiles(tmp_path / "tls")
    proxy = kqp(mock_cluster, tls=certs.listener(client_auth="none"), open_files=OPEN_FILES)
    host, port = split_host_port(proxy.bootstrap)
    mark = len(proxy.log_lines())
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            flood.append(socket.create_connection((host, port), timeout=5))
        proxy.wait_for_log("accept failed", 10.0, after=mark)
    finally:
        for sock in flood:
            sock.close()

    # Every flooding socket is gone; kqp must have resumed accepting to serve this one.
    deadline, last = time.monotonic() + 15.0, None
    while time.monotonic() < deadline:
        try:
            with tls_socket(proxy.bootstrap, certs.context()) as sock:
                assert api_versions_over(sock) == 7
            break
        except (OSError, ssl.SSLError, ConnectionError) as exc:   # still closing the flood's sockets
            last = exc
            time.sleep(0.2)
    else:
        pytest.fail(f"the TLS listener never accepted again after running out of descriptors: {last!r}")
    assert proxy.proc.poll() is None
