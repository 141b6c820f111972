"""The TLS listeners' own accept loop: which accept errors are a reason to back off.

asyncio's servers treat a client that reset before accept() (ECONNABORTED) as nothing happened
and back off only when kqp itself is short of something (EMFILE and the like: tests/e2e/
test_tls_accept.py floods a real kqp for that). The listening socket here is real; only its
accept() is made to fail as the kernel would, since a client cannot make Linux return it on demand.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl

import pytest

from kqp.config.model import HostPort
from kqp.proxy.runtime.listeners import ListenerSet, ListenerTls, bind_socket


class _Accepting(socket.socket):
    """A listening socket whose next accept() fails with `error`."""

    error: OSError

    def accept(self) -> tuple[socket.socket, object]:
        raise self.error


@pytest.mark.parametrize(("error", "backs_off"), [
    (ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort"), False),
    (OSError(errno.EMFILE, "Too many open files"), True),
], ids=["client-gone-before-accept", "out-of-descriptors"])
async def test_only_a_shortage_stops_accepting_for_a_moment(error: OSError, backs_off: bool,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    tls = ListenerTls(context=ssl.create_default_context, handshake_timeout=1.0, refused=lambda *_: None)
    listeners = ListenerSet(loop, HostPort("127.0.0.1", 0), "127.0.0.1", lambda node_id: 0,
                            lambda *_: asyncio.Protocol(), tls=tls)
    bound = bind_socket("127.0.0.1", 0)
    with _Accepting(fileno=bound.detach()) as sock:
        sock.error = error
        loop.add_reader(sock, lambda: None)
        try:
            with caplog.at_level(logging.WARNING, logger="kqp.listeners"):
                listeners._accept(sock, "bootstrap", None, None)
            assert (sock in listeners._retries, "accept failed" in caplog.text) == (backs_off, backs_off)
        finally:
            loop.remove_reader(sock)
            await listeners.close()   # cancels a pending back-off
