"""A bare TCP byte relay: the least any Python proxy on asyncio can cost.

`kqp bench` measures kqp against this relay to separate what kqp's Kafka work costs from what any
asyncio proxy pays for moving bytes through one more process. So it does nothing kqp does not have
to do: no parsing, no buffering of its own, one upstream connection per client connection, and
backpressure both ways. It cannot rewrite broker addresses, so the benchmark has the broker
advertise the relay's address instead.

Run it with `python -m kqp.proxy.bench.relay --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092`; it
logs `relay ready` on stderr once listening. With `--tls-cert` and `--tls-key` it terminates TLS and
relays plaintext (the benchmark's TLS upstream). `Half` and `ClientHalf` are also the forwarding
core of the test suite's wire tap (tests/helpers/wire_tap.py), which subclasses them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import cast


class Half(asyncio.Protocol):
    """One side of a relayed connection: what it reads goes straight into its peer's transport.

    Flow control is crossed over: when *this* side's transport cannot keep up writing, asyncio calls
    `pause_writing` here, and the right reaction is to stop reading the *peer*, whose bytes would
    otherwise pile up in our write buffer.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Half | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        _no_delay(self.transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)

    def eof_received(self) -> bool | None:
        # Half-close is not part of Kafka's protocol: treat EOF as the end of the whole pair.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        peer, self.peer = self.peer, None
        if peer is not None:
            peer.peer = None
            if peer.transport is not None:
                peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class ClientHalf(Half):
    """The accepted side: it opens its upstream connection and reads nothing until that is up."""

    def __init__(self, loop: asyncio.AbstractEventLoop, upstream: tuple[str, int]) -> None:
        super().__init__()
        self._loop = loop
        self._upstream = upstream
        self._connecting: asyncio.Task[None] | None = None
        self._early: list[bytes] | None = []  # bytes read before the upstream connection exists

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        # Stop reading until the upstream exists. uvloop starts reading only after this callback
        # returns, so a few bytes may still arrive first: those wait in `_early`.
        self.transport.pause_reading()
        self._connecting = self._loop.create_task(self._connect())

    def data_received(self, data: bytes) -> None:
        if self._early is not None:
            self._early.append(data)
        else:
            super().data_received(data)

    def upstream_half(self) -> Half:
        """The protocol for this connection's upstream side."""
        return Half()

    async def _connect(self) -> None:
        host, port = self._upstream
        try:
            _, upstream = await self._loop.create_connection(self.upstream_half, host, port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None:  # the client left while we were connecting
            assert upstream.transport is not None
            upstream.transport.close()
            return
        self.peer, upstream.peer = upstream, self
        early, self._early = self._early or [], None
        for data in early:  # through data_received, so a subclass sees these bytes too
            self.data_received(data)
        self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        super().connection_lost(exc)


def _no_delay(transport: asyncio.Transport) -> None:
    # Kafka clients pipeline small requests; Nagle's algorithm would add latency the benchmark
    # would then blame on the relay.
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


async def serve(listen: tuple[str, int], upstream: tuple[str, int],
                ready: Callable[[int], None] | None = None, backlog: int = 4096,
                tls: ssl.SSLContext | None = None) -> None:
    """Relay every connection accepted on `listen` to `upstream` until cancelled (terminating TLS
    on the listening side when `tls` is a server context)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ClientHalf(loop, upstream), listen[0], listen[1],
                                      backlog=backlog, reuse_address=True, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready(port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kqp-relay", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_host_port, required=True, help="HOST:PORT (port 0: any)")
    parser.add_argument("--upstream", type=_host_port, required=True, help="HOST:PORT")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--tls-cert", help="terminate TLS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", help="the key of --tls-cert (PEM)")
    args = parser.parse_args(argv)
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            parser.error("--tls-cert and --tls-key go together")
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.tls_cert, args.tls_key)

    def ready(port: int) -> None:
        print(f"relay ready on {args.listen[0]}:{port}", file=sys.stderr, flush=True)

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(args.listen, args.upstream, ready, tls=tls)

    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
