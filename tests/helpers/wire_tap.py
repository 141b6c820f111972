"""The wire tap: TCP relays that timestamp every Kafka frame in each direction and keep clients on the tap.

Quota tests must prove facts on the wire, not kqp's beliefs about itself: what the upstream
received and when, and what throttle the client was told and when. One `WireTap` owns any number
of relays ("hops", one listening port per target broker) on one asyncio loop in a daemon thread,
with one clock (`time.monotonic`, the CLOCK_MONOTONIC kqp's process reads too, so timestamps from
kqp's logs and every tap compare directly) and one log of requests, responses and connections.

Built from two parts that are tested on their own:

* forwarding: the bench's bare relay (`kqp.proxy.bench.relay.Half`/`ClientHalf`), so the tap has
  the same backpressure both ways and the same close propagation as the benchmark's reference;
* framing and labels: `kqp.protocol` (`FrameReader`, `response_correlation_id`) and
  `wire_labels.py`, which keeps the checks that must not share a bug with kqp independent of it:
  `throttle_time_ms` is read by kafka-python's response classes (Fetch, the big one, only has its
  leading field read), and addresses are rewritten by byte substitution, not by kqp's rewriter.

Why addresses are rewritten: a Kafka client learns broker addresses from Metadata (and
FindCoordinator, DescribeCluster) and connects to them directly, so a relay in front of the
bootstrap address alone is bypassed. The tap replaces every target address it relays, wherever it
appears in a response, with its own hop's address: the bytes (string length, host, int32 port), in
both the classic (int16 length) and the compact (uvarint length + 1) encodings; host-then-port is
how every Kafka response carries an address. Frames are forwarded whole, so a pattern never
straddles two reads.

Responses are matched to their requests by correlation id per connection, which gives each
response its api key and version.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.frames import FrameReader
from kqp.protocol.headers import response_correlation_id
from kqp.proxy.bench.relay import ClientHalf, Half

from .loop_thread import loop_in_thread
from .net import LOOPBACK, split_host_port
from .wire_labels import (
    address_substitutions,
    expects_response,
    fetch_counts,
    produce_counts,
    request_labels,
    response_throttle_ms,
)

__all__ = ["Pair", "WireConnection", "WireRequest", "WireResponse", "WireTap", "address_substitutions",
           "request_labels"]

MAX_FRAME_BYTES = 1 << 28
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request frame that passed the tap towards its target."""

    at: float                   # time.monotonic() when the whole frame had reached the tap
    hop: str                    # "host:port" the request was relayed to
    connection: int             # tap-wide connection number, 1-based in accept order
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None       # None also when kqp.protocol cannot parse the header
    size: int                   # whole frame, 4-byte size prefix included (what kqp charges)
    expects_response: bool      # False only for acks=0 Produce
    frame: bytes | None = None  # the whole frame, for the api keys the tap was asked to keep
    records: int = 0            # Produce: records in its batches (from batch headers); else 0
    batches: int = 0            # Produce: its record batches; else 0


@dataclass(frozen=True, slots=True)
class WireResponse:
    """One response frame that passed the tap back towards the client."""

    at: float
    connection: int
    correlation_id: int
    api_key: int                # -1 for a response to no request the tap saw (the peer's bug)
    api_version: int
    size: int                   # size prefix included, as above
    throttle_ms: int | None     # None: this version has no throttle_time_ms (or it did not decode)
    request_at: float           # when its request passed the tap
    frame: bytes | None = None  # the whole frame (as forwarded), for the api keys the tap keeps
    records: int = 0            # Fetch, when the tap counts them (`count_fetches`): records, batches
    batches: int = 0


@dataclass(slots=True)
class WireConnection:
    number: int
    hop: str
    opened_at: float
    closed_at: float | None = None
    closed_by: str | None = None         # "client", "target" or "tap"
    # (api key, seconds outstanding) of each request still owed a response when the pair closed
    unanswered_at_close: tuple[tuple[int, float], ...] = ()


class Pair:
    """What the tap knows of one relayed connection: its record and the requests owed a response."""

    def __init__(self, tap: WireTap, conn: WireConnection) -> None:
        self.tap = tap
        self.conn = conn
        self.pending: dict[int, WireRequest] = {}
        self.transports: dict[str, asyncio.Transport] = {}   # "client" / "target" -> its socket

    def closed(self, side: str) -> None:
        """The first side to go names who closed the pair; the second finds it recorded."""
        conn = self.conn
        with self.tap.lock:
            if conn.closed_at is not None:
                return
            conn.closed_at = self.tap.clock()
            conn.closed_by = "tap" if self.tap.stopping else side
            conn.unanswered_at_close = tuple((r.api_key, conn.closed_at - r.at)
                                             for r in self.pending.values() if r.expects_response)


class _FramedHalf(Half):
    """A relay half that forwards whole frames, each passed through `on_frame` on the way."""

    side = ""  # "client" or "target": who this half reads from

    def __init__(self) -> None:
        super().__init__()
        self.pair: Pair | None = None
        self._frames = FrameReader(MAX_FRAME_BYTES)

    def on_frame(self, frame: memoryview) -> bytes | memoryview:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.pair is not None:
            self.pair.tap.live.add(transport)
            self.pair.transports[self.side] = self.transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._frames.received(data)
            while (frame := self._frames.next_frame()) is not None:
                super().data_received(self.on_frame(frame))
        except ProtocolError:  # not Kafka framing: nothing sensible to relay
            assert self.transport is not None
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pair is not None:
            self.pair.closed(self.side)
            self.pair.tap.live.discard(self.transport)  # type: ignore[arg-type]
        super().connection_lost(exc)


class _TargetHalf(_FramedHalf):
    side = "target"

    def on_frame(self, frame: memoryview) -> bytes | memoryview:
        assert self.pair is not None
        return self.pair.tap.on_response(self.pair, frame)


class _TapClientHalf(ClientHalf, _FramedHalf):
    side = "client"

    def __init__(self, loop: asyncio.AbstractEventLoop, tap: WireTap, hop: str, target: tuple[str, int]) -> None:
        super().__init__(loop, target)
        self._tap, self._hop = tap, hop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.pair = self._tap.open_pair(self._hop)
        super().connection_made(transport)

    def upstream_half(self) -> Half:
        half = _TargetHalf()
        half.pair = self.pair
        return half

    def connection_lost(self, exc: Exception | None) -> None:
        # ClientHalf closes this side itself when the target refuses the connection: its connect
        # task has then finished without linking a peer. That close is the target's doing.
        if self.pair is not None and self.peer is None and self._connecting is not None and self._connecting.done():
            self.pair.closed("target")
        super().connection_lost(exc)

    def on_frame(self, frame: memoryview) -> bytes | memoryview:
        assert self.pair is not None
        return self._tap.on_request(self.pair, frame)


class WireTap:
    """Relays to any number of targets, rewriting target addresses to hop addresses in responses.

    `keep_frames` names the api keys whose whole frames (requests and responses) are kept on the
    records, for tests that read bodies; everything else is kept as labels only.
    """

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic,
                 keep_frames: Collection[int] = (), tls: ssl.SSLContext | None = None,
                 count_fetches: bool = False) -> None:
        self.name = name
        self.count_fetches = count_fetches   # count the records and batches of every Fetch response
        self.tls = tls   # a server context: each hop terminates TLS and relays plaintext to its target
        self.clock = clock
        self.keep_frames = frozenset(keep_frames)
        self.lock = threading.Lock()
        self.stopping = False
        self._requests: list[WireRequest] = []
        self._responses: list[WireResponse] = []
        self._connections: list[WireConnection] = []
        self._substitutions: list[tuple[bytes, bytes]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self.live: set[asyncio.BaseTransport] = set()  # every open transport of every hop, for stop()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.hops: dict[tuple[str, int], str] = {}   # target -> "127.0.0.1:port"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> WireTap:
        self._loop, self._thread = loop_in_thread(f"wiretap-{self.name}")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            self.stopping = True
            for server in self._servers:
                server.close()
            for transport in list(self.live):
                transport.close()
            for _ in range(100):  # bounded: let every connection_lost run before the loop stops
                if not self.live:
                    break
                await asyncio.sleep(0.01)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(10)

    def __enter__(self) -> WireTap:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def relay(self, target: str | tuple[str, int]) -> str:
        """Open a hop to `target` ("h:p" or a tuple); its "127.0.0.1:port" (one hop per target)."""
        key = split_host_port(target) if isinstance(target, str) else target
        if key in self.hops:
            return self.hops[key]
        loop = self._loop
        assert loop is not None, "start() the tap first"

        async def open_hop() -> str:
            port = await self.serve(key, 0)
            with self.lock:
                self._substitutions.extend(address_substitutions(key, (LOOPBACK, port)))
            return f"{LOOPBACK}:{port}"

        address = asyncio.run_coroutine_threadsafe(open_hop(), loop).result(10)
        self.hops[key] = address
        return address

    async def serve(self, target: tuple[str, int], port: int) -> int:
        """Listen on `port` (0: any) for connections to relay to `target`, on the tap's loop; the port."""
        loop = asyncio.get_running_loop()
        hop = f"{LOOPBACK}:{port}"
        server = await loop.create_server(lambda: _TapClientHalf(loop, self, hop, target), LOOPBACK, port,
                                          ssl=self.tls)
        self._servers.append(server)
        port = server.sockets[0].getsockname()[1]
        hop = f"{LOOPBACK}:{port}"
        return port

    # -- what was seen ---------------------------------------------------------------------------
    def requests(self, *, client_id: str | None = None, api_key: int | None = None) -> list[WireRequest]:
        with self.lock:
            seen = list(self._requests)
        return [r for r in seen if (client_id is None or r.client_id == client_id)
                and (api_key is None or r.api_key == api_key)]

    def responses(self, *, api_key: int | None = None) -> list[WireResponse]:
        with self.lock:
            seen = list(self._responses)
        return [r for r in seen if api_key is None or r.api_key == api_key]

    def connections(self) -> list[WireConnection]:
        with self.lock:
            return [WireConnection(c.number, c.hop, c.opened_at, c.closed_at, c.closed_by,
                                   c.unanswered_at_close) for c in self._connections]

    # -- called by the relay halves, on the tap's loop -------------------------------------------
    def open_pair(self, hop: str) -> Pair:
        with self.lock:
            conn = WireConnection(len(self._connections) + 1, hop, self.clock())
            self._connections.append(conn)
        return Pair(self, conn)

    def on_request(self, pair: Pair, frame: memoryview) -> memoryview:
        now = self.clock()
        if len(frame) < 12:
            return frame
        api_key, version, correlation_id, client_id, body_offset = request_labels(frame)
        expects = expects_response(api_key, version, frame, body_offset)
        records, batches = produce_counts(frame, version) if api_key == ApiKey.Produce else (0, 0)
        seen = WireRequest(now, pair.conn.hop, pair.conn.number, api_key, version, correlation_id, client_id,
                           len(frame), expects, bytes(frame) if api_key in self.keep_frames else None, records,
                           batches)
        with self.lock:
            self._requests.append(seen)
        if expects:
            pair.pending[correlation_id] = seen
        return frame

    def on_response(self, pair: Pair, frame: memoryview) -> bytes | memoryview:
        now = self.clock()
        if len(frame) < 8:
            return frame
        correlation_id = response_correlation_id(frame)
        request = pair.pending.pop(correlation_id, None)
        if request is None:
            # A response to nothing (or to acks=0 Produce): the peer's bug, kept for the test to see.
            with self.lock:
                self._responses.append(WireResponse(now, pair.conn.number, correlation_id, -1, -1, len(frame),
                                                    None, now))
            return frame
        out: bytes | memoryview = frame
        if request.api_key != ApiKey.Fetch:
            # Fetch responses carry record data, never broker addresses: leave them untouched.
            with self.lock:
                substitutions = list(self._substitutions)
            raw = bytes(frame)
            for old, new in substitutions:
                if old in raw:
                    raw = raw.replace(old, new)
            if raw != frame:
                out = _I32.pack(len(raw) - 4) + raw[4:]
        throttle = response_throttle_ms(memoryview(out), request.api_key, request.api_version)
        records, batches = (fetch_counts(memoryview(out), request.api_version)
                            if self.count_fetches and request.api_key == ApiKey.Fetch else (0, 0))
        seen = WireResponse(now, pair.conn.number, correlation_id, request.api_key, request.api_version,
                            len(out), throttle, request.at, bytes(out) if request.api_key in self.keep_frames else None,
                            records, batches)
        with self.lock:
            self._responses.append(seen)
        return out
