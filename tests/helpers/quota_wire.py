"""A wire tap for quota tests: TCP relays that timestamp every Kafka frame and keep clients on the tap.

Quota tests must prove facts on the wire, not kqp's beliefs about itself: what the upstream
received and when, and what throttle the client was told and when. One `WireTap` owns any number
of relays ("hops", one listening port per target broker) on one asyncio loop in a daemon thread,
with one clock (`time.monotonic`, so timestamps from every tap in the test process compare
directly) and one log of requests, responses and connections.

Why this and not `helpers.relay.RecordingRelay`: a Kafka client learns broker addresses from
Metadata (and FindCoordinator, DescribeCluster) and connects to them directly, so a relay in front
of the bootstrap address alone is bypassed. A tap rewrites every target address it relays, wherever
it appears in a response, into its own hop's address, so every connection stays on the tap. The
rewrite is a byte substitution of (string length, host, int32 port), in both the classic (int16
length) and the compact (uvarint length + 1) encodings; host-then-port is how every Kafka response
carries an address. Frames are forwarded whole, so a pattern never straddles two reads.

Responses are matched to their requests by correlation id per connection, which gives each
response its api key and version; `throttle_time_ms` is read from it with kafka-python's own
response classes (Fetch, the big one, only has its leading field read).
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer  # noqa: F401  (imports register the response classes below)
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords

from .net import LOOPBACK, split_host_port

PRODUCE, FETCH, API_VERSIONS = 0, 1, 18
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_REQUEST_PREFIX = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request frame that passed the tap towards its target."""

    at: float                   # time.monotonic() when the whole frame had reached the tap
    hop: str                    # "host:port" the request was relayed to
    connection: int             # tap-wide connection number, 1-based in accept order
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int                   # whole frame, 4-byte size prefix included (what kqp charges)
    expects_response: bool      # False only for acks=0 Produce
    records: int = 0            # Produce: records in its batches (from batch headers); else 0


@dataclass(frozen=True, slots=True)
class WireResponse:
    """One response frame that passed the tap back towards the client."""

    at: float
    connection: int
    correlation_id: int
    api_key: int
    api_version: int
    size: int                   # size prefix included, as above
    throttle_ms: int | None     # None: this version has no throttle_time_ms (or it did not decode)
    request_at: float           # when its request passed the tap


@dataclass(slots=True)
class WireConnection:
    number: int
    hop: str
    opened_at: float
    closed_at: float | None = None
    closed_by: str | None = None         # "client", "target" or "tap"
    # (api key, seconds outstanding) of each request still owed a response when the pair closed
    unanswered_at_close: tuple[tuple[int, float], ...] = ()


def read_request_header(frame: bytes) -> tuple[int, int, int, str | None]:
    """(api_key, api_version, correlation_id, client_id) of a request frame without its prefix.

    Every request header version starts with these four, the client id a classic nullable string.
    """
    api_key, version, correlation_id, length = _REQUEST_PREFIX.unpack_from(frame, 0)
    client_id = None if length < 0 else frame[10:10 + length].decode("utf-8", "replace")
    return api_key, version, correlation_id, client_id


def produce_facts(frame: bytes, version: int) -> tuple[bool, int]:
    """(expects a response, records carried) of a Produce request frame without its prefix.

    Only acks=0 Produce goes unanswered by a broker. Records are counted from each batch's header
    (record bodies are never read), so a test can prove what reached the upstream, resends included.
    """
    try:
        request = ProduceRequest.decode(frame, version=version, header=True)
    except Exception:  # an undecodable request is the proxy's problem to report, not the tap's
        return True, 0
    records = 0
    for topic in request.topic_data:
        for partition in topic.partition_data:
            for batch in MemoryRecords(bytes(partition.records or b"")):
                # A v2 batch's header holds its count; a legacy (magic 0/1) message set is walked.
                count = getattr(batch, "records_count", None)
                records += count if count is not None else sum(1 for _ in batch)
    return request.acks != 0, records


def produce_expects_response(frame: bytes, version: int) -> bool:
    """False for an acks=0 Produce request (the only request a broker does not answer)."""
    return produce_facts(frame, version)[0]


def response_throttle_ms(frame: bytes, api_key: int, version: int) -> int | None:
    """`throttle_time_ms` of a response frame without its prefix, None where the version has none."""
    if api_key == FETCH:
        if version < 1:
            return None
        offset = 4
        if FetchResponse.flexible_version_q(version):
            offset += 1  # response header v1: an empty tagged-field section (count 0, one byte)
        return _I32.unpack_from(frame, offset)[0]
    cls = ResponseClassRegistry._response_class_registry.get(api_key)
    if cls is None:
        return None
    try:
        decoded = cls.decode(frame, version=version, header=True)
    except Exception:
        return None
    value = getattr(decoded, "throttle_time_ms", None)
    return value if isinstance(value, int) else None


def address_substitutions(target: tuple[str, int], hop: tuple[str, int]) -> list[tuple[bytes, bytes]]:
    """Byte patterns that turn `target` into `hop` wherever a response carries it."""
    (th, tp), (hh, hp) = target, hop
    tb, hb = th.encode(), hh.encode()
    return [
        (_I16.pack(len(tb)) + tb + _I32.pack(tp), _I16.pack(len(hb)) + hb + _I32.pack(hp)),   # classic
        (bytes([len(tb) + 1]) + tb + _I32.pack(tp), bytes([len(hb) + 1]) + hb + _I32.pack(hp)),  # compact
    ]


class _Frames:
    """Cuts a byte stream into Kafka frames (bodies without the size prefix), any chunking."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        out: list[bytes] = []
        while len(self._buffer) >= 4:
            (size,) = _I32.unpack_from(self._buffer, 0)
            if size < 0 or len(self._buffer) < 4 + size:
                break
            out.append(bytes(self._buffer[4:4 + size]))
            del self._buffer[:4 + size]
        return out


class WireTap:
    """Relays to any number of targets, rewriting target addresses to hop addresses in responses."""

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._requests: list[WireRequest] = []
        self._responses: list[WireResponse] = []
        self._connections: list[WireConnection] = []
        self._substitutions: list[tuple[bytes, bytes]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Future[None]] = set()
        self._serving: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.hops: dict[tuple[str, int], str] = {}   # target -> "127.0.0.1:port"
        self.unmatched: list[bytes] = []   # response frames that answered no request the tap saw

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> WireTap:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name=f"wiretap-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise TimeoutError(f"wire tap {self.name} did not start within 10s")
        return self

    def _call(self, make: Callable[[], object], timeout: float = 10.0) -> object:
        assert self._loop is not None, "start() the tap first"
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            self._stopping = True
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.close()
            # Ending the pumps lets every connection handler return by itself; cancelling the
            # handlers would make asyncio's stream server log each one as an error.
            for task in list(self._pumps):
                task.cancel()
            await asyncio.gather(*self._serving, return_exceptions=True)
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

        async def open_hop() -> str:
            hop_name = ""

            async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task is not None
                self._serving.add(task)
                try:
                    await self._serve(hop_name, key, reader, writer)
                finally:
                    self._serving.discard(task)

            server = await asyncio.start_server(on_client, LOOPBACK, 0)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            hop_name = f"{LOOPBACK}:{port}"
            with self._lock:
                self._substitutions.extend(address_substitutions(key, (LOOPBACK, port)))
            return hop_name

        address = self._call(open_hop)
        assert isinstance(address, str)
        self.hops[key] = address
        return address

    # -- what was seen ---------------------------------------------------------------------------
    def requests(self, *, client_id: str | None = None, api_key: int | None = None) -> list[WireRequest]:
        with self._lock:
            seen = list(self._requests)
        return [r for r in seen if (client_id is None or r.client_id == client_id)
                and (api_key is None or r.api_key == api_key)]

    def responses(self, *, api_key: int | None = None) -> list[WireResponse]:
        with self._lock:
            seen = list(self._responses)
        return [r for r in seen if api_key is None or r.api_key == api_key]

    def connections(self) -> list[WireConnection]:
        with self._lock:
            return [WireConnection(c.number, c.hop, c.opened_at, c.closed_at, c.closed_by,
                                   c.unanswered_at_close) for c in self._connections]

    # -- relaying --------------------------------------------------------------------------------
    async def _serve(self, hop: str, target: tuple[str, int], client_reader: asyncio.StreamReader,
                     client_writer: asyncio.StreamWriter) -> None:
        with self._lock:
            conn = WireConnection(len(self._connections) + 1, hop, self._clock())
            self._connections.append(conn)
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            conn.closed_at, conn.closed_by = self._clock(), "target"
            return
        self._writers.update((client_writer, up_writer))
        pending: dict[int, WireRequest] = {}
        to_target = asyncio.ensure_future(self._pump(
            client_reader, up_writer, lambda f: self._on_request(conn, pending, f)))
        to_client = asyncio.ensure_future(self._pump(
            up_reader, client_writer, lambda f: self._on_response(conn, pending, f)))
        self._pumps.update((to_target, to_client))
        done, _ = await asyncio.wait({to_target, to_client}, return_when=asyncio.FIRST_COMPLETED)
        self._pumps.difference_update((to_target, to_client))
        with self._lock:
            conn.closed_at = self._clock()
            if self._stopping:
                conn.closed_by = "tap"
            else:
                conn.closed_by = "client" if to_target in done else "target"
            conn.unanswered_at_close = tuple((r.api_key, conn.closed_at - r.at)
                                             for r in pending.values() if r.expects_response)
        for task in (to_target, to_client):
            task.cancel()
        for writer in (client_writer, up_writer):
            writer.close()
            self._writers.discard(writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    on_frame: Callable[[bytes], bytes]) -> None:
        frames = _Frames()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    out = on_frame(frame)
                    writer.write(_I32.pack(len(out)) + out)
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    def _on_request(self, conn: WireConnection, pending: dict[int, WireRequest], frame: bytes) -> bytes:
        now = self._clock()
        if len(frame) < _REQUEST_PREFIX.size:
            return frame
        api_key, version, correlation_id, client_id = read_request_header(frame)
        expects, records = produce_facts(frame, version) if api_key == PRODUCE else (True, 0)
        seen = WireRequest(now, conn.hop, conn.number, api_key, version, correlation_id, client_id,
                           len(frame) + 4, expects, records)
        with self._lock:
            self._requests.append(seen)
        if expects:
            pending[correlation_id] = seen
        return frame

    def _on_response(self, conn: WireConnection, pending: dict[int, WireRequest], frame: bytes) -> bytes:
        now = self._clock()
        if len(frame) < 4:
            return frame
        (correlation_id,) = _I32.unpack_from(frame, 0)
        request = pending.pop(correlation_id, None)
        if request is not None and request.api_key != FETCH:
            # Fetch responses carry record data, never broker addresses: leave them untouched.
            with self._lock:
                substitutions = list(self._substitutions)
            for old, new in substitutions:
                if old in frame:
                    frame = frame.replace(old, new)
        if request is None:
            # A response to nothing (or to acks=0 Produce): the peer's bug, kept for the test to see.
            seen = WireResponse(now, conn.number, correlation_id, -1, -1, len(frame) + 4, None, now)
            with self._lock:
                self._responses.append(seen)
                self.unmatched.append(frame)
            return frame
        throttle = response_throttle_ms(frame, request.api_key, request.api_version)
        seen = WireResponse(now, conn.number, correlation_id, request.api_key, request.api_version,
                            len(frame) + 4, throttle, request.at)
        with self._lock:
            self._responses.append(seen)
        return frame
