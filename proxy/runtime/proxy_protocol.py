"""A load balancer's PROXY header, read off an accepted socket before anything else on the connection.

With `proxy_protocol:` on a listener (listeners.py), each accepted socket comes here first: its peer
(the balancer) is checked against `trusted`, the header is read with the sans-io
`kqp.protocol.proxy_header.ProxyHeaderParser`, and the address it names becomes the connection's
peer for everything after (`limits:`, TLS refusals, logs, the core). Each read peeks (`MSG_PEEK`)
and only the bytes the parser says are the header's are taken from the kernel, so the client's
first bytes stay for TLS or the edge. Why at the edge rather than in the core: proxy/README.md,
"Behind a load balancer".

Refusals are counted in `kqp_connections_closed_total{reason}` and logged at most once a second per
cause (logger `kqp.proxy_protocol`): `proxy_header_untrusted`, `proxy_header_malformed`,
`proxy_header_missing`, `proxy_header_timeout`. A client that leaves first (a balancer's health
check) is `client_closed`, logged at debug level only.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from kqp.config.model import ProxyProtocolConfig
from kqp.protocol.proxy_header import NO_HEADER, ProxyHeader, ProxyHeaderError, ProxyHeaderParser
from kqp.proxy.tls.peers import Refusal, Refused

from .admission import peer_ip, peer_name

__all__ = ["HeaderReader"]

PEEK_BYTES = 536   # the specification's smallest TCP segment: a header sent at once fits in one


class HeaderReader:
    """The listeners' PROXY header step: the real client's address for an accepted socket, or a refusal."""

    def __init__(self, loop: asyncio.AbstractEventLoop, config: ProxyProtocolConfig,
                 refused: Callable[[str, str, Refusal], None]) -> None:
        self._loop = loop
        self.config = config
        self._refused = refused

    def applies_to(self, listener: str) -> bool:
        return self.config.applies_to(listener)

    async def real_peer(self, conn: socket.socket, address: object, listener: str) -> object | None:
        """The address the connection is to be known by (the header's source, or `address` where the
        header names none or none is expected), or None: refused, counted, logged, and `conn` closed."""
        try:
            return await self._real_peer(conn, address)
        except Refused as refused:
            conn.close()
            self._refused(listener, peer_name(address), refused.refusal)
            return None
        except BaseException:   # cancelled at shutdown, or kqp's bug: the socket is closed either way
            conn.close()
            raise

    async def _real_peer(self, conn: socket.socket, address: object) -> object:
        config = self.config
        ip = peer_ip(address)
        trusted = config.trusts(ip)
        if not trusted and config.mode == "required":
            raise Refused(Refusal("proxy_header_untrusted", f"{ip} is not in proxy_protocol.trusted"))
        try:
            async with asyncio.timeout(config.header_timeout_ms / 1000):
                header = await self._read(conn)
        except TimeoutError:
            raise Refused(Refusal("proxy_header_timeout", f"no complete PROXY header within "
                                                           f"{config.header_timeout_ms} ms")) from None
        if header is NO_HEADER:
            if trusted and config.mode == "required":
                raise Refused(Refusal("proxy_header_missing", "no PROXY header (proxy_protocol.mode is required)"))
            return address   # optional: a direct client
        assert isinstance(header, ProxyHeader)
        if not trusted:
            raise Refused(Refusal("proxy_header_untrusted", f"a PROXY header from {ip}, which is not in "
                                                             "proxy_protocol.trusted"))
        return header.source or address   # LOCAL, UNKNOWN, UNSPEC, AF_UNIX: the balancer's own connection

    async def _read(self, conn: socket.socket) -> ProxyHeader | object:
        parser = ProxyHeaderParser()
        while True:
            try:
                data = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                await self._readable(conn)
                continue
            except OSError as exc:   # reset by the client
                raise Refused(Refusal("client_closed", f"connection lost before its PROXY header: {exc}",
                                       warn=False)) from None
            if not data:
                raise Refused(Refusal("client_closed", "closed before a PROXY header", warn=False))
            try:
                taken = parser.receive(data)
            except ProxyHeaderError as exc:
                raise Refused(Refusal("proxy_header_malformed", f"malformed PROXY header: {exc}")) from None
            if taken:
                # Peeked, so in the kernel's buffer already: this returns exactly `taken` bytes.
                dropped = conn.recv(taken)
                assert len(dropped) == taken, (len(dropped), taken)
            if parser.result is not None:
                return parser.result
            await self._readable(conn)   # everything peeked was the header's, and it is not complete

    async def _readable(self, conn: socket.socket) -> None:
        ready = self._loop.create_future()
        fd = conn.fileno()
        self._loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            self._loop.remove_reader(fd)
