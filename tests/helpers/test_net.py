"""`unread_by_peer`, the e2e tests' view of what a muted kqp has not read, against a socket pair it can see."""

from __future__ import annotations

import socket

from .net import LOOPBACK, unread_by_peer


def test_unread_by_peer_is_the_peers_receive_queue() -> None:
    with socket.create_server((LOOPBACK, 0)) as server, \
            socket.create_connection(server.getsockname(), timeout=5) as client:
        peer, _ = server.accept()
        with peer:
            assert unread_by_peer(client) == 0
            client.sendall(b"x" * 10_000)   # loopback: in the peer's queue when sendall returns
            assert unread_by_peer(client) == 10_000
            assert len(peer.recv(4000)) == 4000
            assert unread_by_peer(client) == 6000
            assert unread_by_peer(peer) == 0   # the other direction: nothing sent
