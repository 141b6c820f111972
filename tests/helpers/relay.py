"""A recording TCP relay: sits between kqp and an upstream broker and timestamps every frame it sees.

Quota tests must prove facts about what reached the upstream and when ("no request from a muted
connection reached the broker before its throttle time passed"). Asking kqp would only prove that
kqp believes it; a relay on the wire proves it. The relay parses just enough of the Kafka framing to
label each request (size prefix, api key, version, correlation id, client id: the fields every
request header version begins with) and forwards bytes unchanged in both directions.

It runs its own asyncio loop in a daemon thread, so synchronous clients (confluent-kafka, kcat
subprocesses) and async tests can both use it, and its clock is `time.monotonic`, the same
CLOCK_MONOTONIC that kqp's process reads, so timestamps from both sides compare directly.

With a server `tls` context the relay terminates TLS: it is how the tests put a TLS upstream in front
of Tansu, whose own --cert/--key do not work in the version shipped (see tests/e2e/test_tls_upstream.py).

A relay in front of a multi-broker cluster would be bypassed as soon as clients follow the broker
addresses in Metadata; the `tansu_relay` fixture avoids that by making Tansu advertise the relay's
own port, so every connection kqp opens to the upstream passes through the relay.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class SeenRequest:
    """One complete request frame that travelled client -> upstream through the relay."""

    at: float  # time.monotonic() when the frame's last byte reached the relay
    connection: int  # relay connection number, 1-based in accept order
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes after the 4-byte length prefix


@dataclass(frozen=True, slots=True)
class SeenResponse:
    """One complete response frame that travelled upstream -> client through the relay."""

    at: float
    connection: int
    correlation_id: int
    size: int


def parse_request_header(frame: bytes) -> tuple[int, int, int, str | None]:
    """(api_key, api_version, correlation_id, client_id) from a request frame without its length prefix.

    Request header v1 and v2 both start with int16 api_key, int16 api_version, int32 correlation_id
    and a classic (int16-length) nullable client_id string; v2 only appends tagged fields after it.
    """
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    client_id: str | None = None
    if len(frame) >= 10:
        (length,) = struct.unpack_from(">h", frame, 8)
        if 0 <= length <= len(frame) - 10:
            client_id = frame[10 : 10 + length].decode("utf-8", "replace")
    return api_key, api_version, correlation_id, client_id


class _FrameSplitter:
    """Cuts a byte stream into Kafka frames (int32 size + body); tolerates any chunking."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        frames: list[bytes] = []
        while len(self._buffer) >= 4:
            (size,) = struct.unpack_from(">i", self._buffer, 0)
            if size < 0 or len(self._buffer) < 4 + size:
                break
            frames.append(bytes(self._buffer[4 : 4 + size]))
            del self._buffer[: 4 + size]
        return frames


class RecordingRelay:
    """Forward 127.0.0.1:`port` to `upstream`, recording every request and response frame.

    Use as a context manager, or call `start()` and `stop()`. `requests()` and `responses()` return
    snapshots; `close_connections()` drops every live pair (fault injection).
    """

    def __init__(self, upstream_host: str, upstream_port: int, *, listen_port: int = 0,
                 clock: Callable[[], float] = time.monotonic, tls: ssl.SSLContext | None = None) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._tls = tls   # a server context: the relay terminates TLS and speaks plaintext upstream
        self._listen_port = listen_port
        self._clock = clock
        self._lock = threading.Lock()
        self._requests: list[SeenRequest] = []
        self._responses: list[SeenResponse] = []
        self._connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RecordingRelay:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._on_client, "127.0.0.1", self._listen_port, ssl=self._tls))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to the starting thread below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name=f"relay->{self.upstream}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise TimeoutError("recording relay did not start within 10s")
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(10)

    def close_connections(self) -> None:
        """Close every relayed connection now, both sides, as a crashing broker would."""
        if self._loop is None:
            return

        async def close_all() -> None:
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)

    def __enter__(self) -> RecordingRelay:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def connection_count(self) -> int:
        with self._lock:
            return self._connections

    def requests(self, *, api_key: int | None = None, client_id: str | None = None) -> list[SeenRequest]:
        with self._lock:
            seen = list(self._requests)
        return [r for r in seen
                if (api_key is None or r.api_key == api_key)
                and (client_id is None or r.client_id == client_id)]

    def responses(self) -> list[SeenResponse]:
        with self._lock:
            return list(self._responses)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()
            self._responses.clear()

    async def _on_client(self, client_reader: asyncio.StreamReader,
                         client_writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self._connections += 1
            number = self._connections
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        self._writers.update((client_writer, up_writer))
        to_upstream = asyncio.ensure_future(
            self._pump(client_reader, up_writer, lambda f: self._record_request(number, f)))
        to_client = asyncio.ensure_future(
            self._pump(up_reader, client_writer, lambda f: self._record_response(number, f)))
        # Either side closing ends the pair, as a TCP proxy between two peers must.
        await asyncio.wait({to_upstream, to_client}, return_when=asyncio.FIRST_COMPLETED)
        for task in (to_upstream, to_client):
            task.cancel()
        for writer in (client_writer, up_writer):
            writer.close()
            self._writers.discard(writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    record: Callable[[bytes], None]) -> None:
        splitter = _FrameSplitter()
        try:
            while data := await reader.read(65536):
                # Record before forwarding: the timestamp is when the relay held the whole frame,
                # which is no later than when the other side could have received it.
                for frame in splitter.feed(data):
                    record(frame)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    def _record_request(self, connection: int, frame: bytes) -> None:
        if len(frame) < _HEADER_PREFIX.size:
            return
        api_key, api_version, correlation_id, client_id = parse_request_header(frame)
        seen = SeenRequest(self._clock(), connection, api_key, api_version, correlation_id,
                           client_id, len(frame))
        with self._lock:
            self._requests.append(seen)

    def _record_response(self, connection: int, frame: bytes) -> None:
        if len(frame) < 4:
            return
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        with self._lock:
            self._responses.append(SeenResponse(self._clock(), connection, correlation_id, len(frame)))
