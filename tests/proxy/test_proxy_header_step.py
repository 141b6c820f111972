"""The listeners' PROXY header step (proxy/runtime/proxy_protocol.py) on real loopback sockets.

A `ListenerSet` with `proxy_protocol:` accepts each socket itself and reads the header off the raw
socket first: the protocol the factory makes must be handed the address the header names, and must
receive exactly the client's bytes after it (on a TLS listener: the handshake goes through after a
header, and the protocol still learns the real address). Every refusal is counted with its reason.
Clients bind 127.0.0.2 and 127.0.0.3 to be sources other than the trusted 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.tls import TlsFiles

from kqp.config.loader import parse_config
from kqp.config.model import HostPort
from kqp.protocol.proxy_header import V2_SIGNATURE
from kqp.proxy.runtime.listeners import ListenerSet, ListenerTls
from kqp.proxy.runtime.proxy_protocol import HeaderReader
from kqp.proxy.tls.contexts import server_context
from kqp.proxy.tls.peers import Refusal

V1 = b"PROXY TCP4 10.9.8.7 127.0.0.1 4321 19092\r\n"
V2_LOCAL = V2_SIGNATURE + b"\x20\x00\x00\x00"
KAFKA_BYTES = b"\x00\x00\x00\x0a" + bytes(10)   # stands for a Kafka frame


class Served(asyncio.Protocol):
    """What the listener's factory made: the peer it was handed and every byte it received."""

    def __init__(self, peer: object, done: Callable[[Served], None]) -> None:
        self.peer, self.data, self._done, self.ssl = peer, bytearray(), done, False
        self.more = asyncio.Event()   # set at each arrival of bytes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.ssl = transport.get_extra_info("ssl_object") is not None
        self._done(self)

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.more.set()


@dataclass
class Rig:
    port: int
    served: asyncio.Queue[Served]
    refused: asyncio.Queue[tuple[str, str, str]] = field(default_factory=asyncio.Queue)   # (listener, peer, reason)

    async def refusal(self) -> tuple[str, str, str]:
        return await asyncio.wait_for(self.refused.get(), 2)


async def start(mode: str, tls: ListenerTls | None = None, **section: Any) -> tuple[Rig, ListenerSet]:
    loop = asyncio.get_running_loop()
    config = parse_config({"proxy_protocol": {"mode": mode, "trusted": ["127.0.0.1/32"], **section}}).proxy_protocol
    served: asyncio.Queue[Served] = asyncio.Queue()
    rig = Rig(0, served)

    def refused(listener: str, peer: str, refusal: Refusal) -> None:
        rig.refused.put_nowait((listener, peer, refusal.reason))

    listeners = ListenerSet(loop, HostPort("127.0.0.1", 0), "127.0.0.1", lambda node_id: 0,
                            lambda name, node_id, slot, peer: Served(peer, served.put_nowait),
                            tls=tls, header=HeaderReader(loop, config, refused))
    rig.port = await listeners.start_bootstrap()
    return rig, listeners


@pytest.fixture
async def rigs() -> AsyncIterator[list[ListenerSet]]:
    started: list[ListenerSet] = []
    yield started
    for listeners in started:
        await listeners.close()


async def connect(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def received(served: Served, size: int) -> bytes:
    """What the protocol has once `size` bytes arrived (or what it has after 5 s without them)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while len(served.data) < size:
                served.more.clear()
                await served.more.wait()
    return bytes(served.data)


async def closed_by_kqp(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 5) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("header", [V1, V2_SIGNATURE + b"\x21\x11\x00\x0c" + bytes([10, 9, 8, 7, 127, 0, 0, 1])
                                    + struct.pack(">HH", 4321, 19092)], ids=["v1", "v2"])
async def test_the_header_names_the_client_and_the_stream_after_it_is_untouched(rigs: list[ListenerSet],
                                                                                 header: bytes) -> None:
    rig, listeners = await start("required")
    rigs.append(listeners)
    _reader, writer = await connect(rig.port)
    writer.write(header + KAFKA_BYTES)
    served = await asyncio.wait_for(rig.served.get(), 5)
    assert served.peer == ("10.9.8.7", 4321)
    assert await received(served, len(KAFKA_BYTES)) == KAFKA_BYTES
    writer.close()


async def test_a_header_trickled_byte_by_byte(rigs: list[ListenerSet]) -> None:
    rig, listeners = await start("required")
    rigs.append(listeners)
    _reader, writer = await connect(rig.port)
    writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for byte in V1:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.002)   # one segment per byte: the step reads a partial header many times
    writer.write(KAFKA_BYTES)
    served = await asyncio.wait_for(rig.served.get(), 5)
    # Made only once the header was whole: it names the header's client, and its stream starts
    # right after the header (a protocol made earlier would have the socket's peer and header bytes).
    assert served.peer == ("10.9.8.7", 4321)
    assert await received(served, len(KAFKA_BYTES)) == KAFKA_BYTES
    assert rig.refused.empty()
    writer.close()


async def test_local_keeps_the_balancers_own_address(rigs: list[ListenerSet]) -> None:
    rig, listeners = await start("required")
    rigs.append(listeners)
    _reader, writer = await connect(rig.port)
    writer.write(V2_LOCAL)
    served = await asyncio.wait_for(rig.served.get(), 5)
    assert served.peer[0] == "127.0.0.1"
    writer.close()


@pytest.mark.parametrize(("mode", "source", "sent", "reason"), [
    ("required", "127.0.0.2", V1, "proxy_header_untrusted"),       # not even read
    ("required", "127.0.0.2", b"", "proxy_header_untrusted"),
    ("optional", "127.0.0.3", V1, "proxy_header_untrusted"),       # a header from a direct client
    ("required", "127.0.0.1", b"PROXY TCP4 10.9.8.7 127.0.0.1 04321 19092\r\n", "proxy_header_malformed"),
    ("required", "127.0.0.1", V2_SIGNATURE + b"\x23\x11\x00\x00", "proxy_header_malformed"),
    ("required", "127.0.0.1", KAFKA_BYTES, "proxy_header_missing"),
    ("required", "127.0.0.1", V1[:20], "proxy_header_timeout"),
    ("required", "127.0.0.1", b"", "proxy_header_timeout"),
])
async def test_refused_with_a_counted_reason(rigs: list[ListenerSet], mode: str, source: str, sent: bytes,
                                             reason: str) -> None:
    rig, listeners = await start(mode, header_timeout_ms=300)
    rigs.append(listeners)
    reader, writer = await connect(rig.port, source)
    writer.write(sent)
    assert await closed_by_kqp(reader)
    assert await rig.refusal() == ("bootstrap", f"{source}:{writer.get_extra_info('sockname')[1]}", reason)
    assert rig.served.empty()   # refused before any protocol was made: never after the refusal either
    writer.close()


async def test_a_client_that_leaves_first_is_client_closed(rigs: list[ListenerSet]) -> None:
    rig, listeners = await start("required")
    rigs.append(listeners)
    _reader, writer = await connect(rig.port)
    writer.write(V1[:10])
    await writer.drain()
    writer.close()   # a balancer's TCP health check
    assert (await rig.refusal())[2] == "client_closed"


@pytest.mark.parametrize("source", ["127.0.0.1", "127.0.0.3"], ids=["trusted", "untrusted"])
async def test_optional_serves_a_direct_client_as_itself(rigs: list[ListenerSet], source: str) -> None:
    rig, listeners = await start("optional")
    rigs.append(listeners)
    _reader, writer = await connect(rig.port, source)
    writer.write(KAFKA_BYTES)
    served = await asyncio.wait_for(rig.served.get(), 5)
    assert served.peer == (source, writer.get_extra_info("sockname")[1])
    assert await received(served, len(KAFKA_BYTES)) == KAFKA_BYTES   # not a byte lost to the look at the first one
    writer.close()


async def test_listeners_the_section_leaves_out_read_no_header(rigs: list[ListenerSet]) -> None:
    rig, listeners = await start("required", listeners=["brokers"])
    rigs.append(listeners)
    _reader, writer = await connect(rig.port, "127.0.0.2")   # untrusted, no header: the bootstrap does not care
    served = await asyncio.wait_for(rig.served.get(), 5)
    assert served.peer is None
    writer.write(V1)
    assert await received(served, len(V1)) == V1
    writer.close()


async def test_on_a_tls_listener_the_header_comes_before_the_handshake(rigs: list[ListenerSet],
                                                                       tmp_path: Path) -> None:
    files = TlsFiles(tmp_path)
    tls_config = parse_config({"tls": {"cert": str(files.server_cert), "key": str(files.server_key)}}).tls
    assert tls_config is not None
    context = server_context(tls_config)
    rig, listeners = await start("required", tls=ListenerTls(lambda: context, 5.0, lambda *_: None))
    rigs.append(listeners)
    raw = socket.create_connection(("127.0.0.1", rig.port))
    raw.sendall(V1)   # the balancer's header, on the raw TCP stream
    client = ssl.create_default_context(cafile=str(files.ca_path))
    _reader, writer = await asyncio.open_connection(sock=raw, ssl=client, server_hostname="127.0.0.1")
    served = await asyncio.wait_for(rig.served.get(), 5)
    assert (served.peer, served.ssl) == (("10.9.8.7", 4321), True)
    writer.write(KAFKA_BYTES)
    await writer.drain()
    assert await received(served, len(KAFKA_BYTES)) == KAFKA_BYTES
    writer.close()
