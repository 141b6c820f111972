"""A saturated broker: a relay whose requests all wait in ONE FIFO drained at C bytes per second.

Adaptive pools and service classes must be measured against an upstream whose latency grows for
every client once it is offered more than it can take, as a broker's request queue and disk make it
grow; Tansu on loopback never saturates, so this relay sits in front of it. Every Kafka frame any
client sends joins one shared FIFO, whole, in arrival order, drained towards the broker at
`capacity` bytes per second (frames of all connections interleave in arrival order, each
connection's keep theirs); the FIFO is bounded (`max_queue_bytes`): once full, no client is read
until it drains (a broker's bounded request queue), every socket readable in a round being read once
first so that a flood cannot starve a small client; responses flow back at once. The drain is a
pacer: credit accrues at C (at most `burst_seconds` of it while idle), each frame spends its size,
one `call_at` timer waits out a debt. `waits` records each frame's queueing delay and client id.
`python -m kqp.proxy.bench.saturated_relay --listen H:P --upstream H:P --capacity C` runs it as a
process (`kqp bench`'s classes workload); tests/helpers/saturated_upstream.py runs it in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameReader
from kqp.protocol.headers import parse_request_header

MAX_FRAME_BYTES = 1 << 28
MIN_TICK = 0.001           # the pacer never re-arms sooner than this
STEP_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Wait:
    """One frame's passage through the FIFO."""

    connection: int
    client_id: str | None    # from the request header (None: not a parseable request)
    size: int
    queued_at: float
    sent_at: float


class _Client(asyncio.Protocol):
    """An accepted client: frames go to the FIFO; its upstream connection's bytes come straight back."""

    def __init__(self, relay: SaturatedRelay, number: int) -> None:
        self.relay = relay
        self.number = number
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.paused: set[str] = set()     # why reading is paused: "connecting", "queue"
        self._frames = FrameReader(MAX_FRAME_BYTES)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.relay.receive_buffer)
        self.relay.clients.add(self)
        self.pause("connecting")
        if self.relay.queued >= self.relay.max_queue_bytes:
            self.pause("queue")
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        target = self.relay.target
        assert target is not None, "relay_to() the broker before clients connect"
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(lambda: _Upstream(self), *target)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None:   # the client left meanwhile
            cast(asyncio.Transport, upstream.transport).close()
            return
        self.upstream = upstream
        self.resume("connecting")
        self.relay.pump()   # frames read before the connection was up may be at the FIFO's head

    def pause(self, reason: str) -> None:
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused.add(reason)

    def resume(self, reason: str) -> None:
        # Two reasons, each lifted only by its own cause (aiohttp's lesson): the queue draining must
        # not resume a client whose upstream is still connecting, nor the other way round.
        self.paused.discard(reason)
        if not self.paused and self.transport is not None:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            self._frames.received(data)
            while (frame := self._frames.next_frame()) is not None:
                self.relay.enqueue(self, bytes(frame))
        except ProtocolError:   # not Kafka framing: nothing sensible to relay
            if self.transport is not None:
                self.transport.abort()

    def pause_writing(self) -> None:   # the client does not read its responses: stop reading them
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.relay.clients.discard(self)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


class _Upstream(asyncio.Protocol):
    """The broker side of one client: what it answers goes back to the client unshaped."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.blocked = False   # the broker is not reading: the drain waits for it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.client.transport is not None:
            self.client.transport.write(data)

    def pause_writing(self) -> None:
        self.blocked = True

    def resume_writing(self) -> None:
        self.blocked = False
        self.client.relay.pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.client.transport is not None:
            self.client.transport.close()


class SaturatedRelay:
    """The relay (module docstring), run on one event loop: `listen()`, `relay_to(broker)`."""

    def __init__(self, capacity: float, *, max_queue_bytes: int = 1_000_000, receive_buffer: int = 65536,
                 burst_seconds: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(capacity)
        self.max_queue_bytes = max_queue_bytes
        self.receive_buffer = receive_buffer
        self.burst_seconds = burst_seconds
        self.clock = clock
        self.target: tuple[str, int] | None = None
        self.port = 0
        self.clients: set[_Client] = set()
        self.fifo: deque[tuple[_Client, bytes, float]] = deque()
        self.queued = 0
        self.peak = 0   # the most the FIFO ever held (the bound, plus what one read brought beyond it)
        self.lock = threading.Lock()
        self._drained: list[tuple[float, int]] = []
        self._waits: list[Wait] = []
        self._credit = 0.0
        self._credited_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._pausing = False
        self._connections = 0
        self._server: asyncio.AbstractServer | None = None

    # -- on the relay's loop -------------------------------------------------------------------
    async def listen(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Accept clients on `host:port` (0: any free port); returns the port."""
        def accept() -> _Client:
            self._connections += 1
            return _Client(self, self._connections)

        self._server = await asyncio.get_running_loop().create_server(accept, host, port)
        self._credited_at = self.clock()
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def relay_to(self, broker: str) -> None:
        """Where every accepted connection goes ("host:port"); before any client connects."""
        self.target = _split(broker)

    def change_capacity(self, capacity: float) -> None:
        """A new C from now on (credit accrued so far was earned at the old one)."""
        self._accrue(self.clock())
        self.capacity = float(capacity)
        self.pump()

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.close()
        for client in list(self.clients):
            if client.transport is not None:
                client.transport.abort()
            if client.upstream is not None and client.upstream.transport is not None:
                client.upstream.transport.abort()

    # -- what happened (any thread) ----------------------------------------------------------
    def drained(self, start: float = 0.0, end: float = float("inf")) -> int:
        """Bytes sent towards the broker in [start, end)."""
        with self.lock:
            return sum(n for at, n in self._drained if start <= at < end)

    def waits(self, start: float = 0.0, end: float = float("inf")) -> list[Wait]:
        """Frames queued in [start, end), with how long each waited."""
        with self.lock:
            return [w for w in self._waits if start <= w.queued_at < end]

    # -- the FIFO and the pacer, on the relay's loop ----------------------------------------------------
    def enqueue(self, client: _Client, frame: bytes) -> None:
        self.fifo.append((client, frame, self.clock()))
        self.queued += len(frame)
        self.peak = max(self.peak, self.queued)
        if self.queued >= self.max_queue_bytes and not self._pausing:
            # At the end of this round of reads, not now: pausing a transport cancels a read the
            # loop has already scheduled for it, so pausing at once would let the first socket read
            # in each round (a flood's) starve the others, which a broker does not do.
            self._pausing = True
            asyncio.get_running_loop().call_soon(self._pause_all)
        self.pump()

    def _pause_all(self) -> None:
        self._pausing = False
        if self.queued >= self.max_queue_bytes:
            for client in self.clients:
                client.pause("queue")

    def _accrue(self, now: float) -> None:
        self._credit = min(self._credit + (now - self._credited_at) * self.capacity,
                           self.capacity * self.burst_seconds)
        self._credited_at = now

    def pump(self) -> None:
        """Send what the credit pays for, then wait out the debt with one timer."""
        now = self.clock()
        self._accrue(now)
        while self.fifo and self._credit >= 0:
            client, frame, queued_at = self.fifo[0]
            upstream = client.upstream
            if client.transport is not None and (upstream is None or upstream.blocked):
                return   # connecting, or the broker is not reading: _connect / resume_writing pump again
            self.fifo.popleft()
            self.queued -= len(frame)
            self._credit -= len(frame)
            if upstream is not None and upstream.transport is not None:
                upstream.transport.write(frame)
            with self.lock:
                self._drained.append((now, len(frame)))
                self._waits.append(Wait(client.number, _client_id(frame), len(frame), queued_at, now))
        if self.queued < self.max_queue_bytes:
            for client in list(self.clients):
                if "queue" in client.paused:
                    client.resume("queue")
        if self.fifo and self._timer is None:
            delay = max(MIN_TICK, -self._credit / self.capacity)
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(loop.time() + delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.pump()


def _client_id(frame: bytes) -> str | None:
    try:
        return parse_request_header(memoryview(frame)).client_id
    except ProtocolError:
        return None


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _serve(args: argparse.Namespace) -> None:
    relay = SaturatedRelay(args.capacity, max_queue_bytes=args.max_queue_bytes)
    relay.relay_to(args.upstream)
    host, port = _split(args.listen)
    await relay.listen(host, port)
    print(f"saturated relay ready on {args.listen}, {args.capacity:.0f} B/s to {args.upstream}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kqp.proxy.bench.saturated_relay",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--listen", required=True, help="host:port to accept clients on")
    parser.add_argument("--upstream", required=True, help="the broker, host:port")
    parser.add_argument("--capacity", type=float, required=True, help="C, bytes per second")
    parser.add_argument("--max-queue-bytes", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
