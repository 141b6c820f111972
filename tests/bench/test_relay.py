"""The bare byte relay (kqp.proxy.bench.relay): bytes pass unchanged both ways, closes propagate.

Sockets on 127.0.0.1 with ephemeral ports only; the relay runs in the test's own event loop via
`serve`, with an in-test echo server as its upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from kqp.proxy.bench.relay import main, serve


@contextlib.asynccontextmanager
async def echo_upstream() -> AsyncIterator[tuple[int, list[int]]]:
    """An upstream that echoes everything; yields its port and a list of closed-connection counts."""
    closed: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            closed.append(1)
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], closed


@contextlib.asynccontextmanager
async def relay_to(upstream_port: int) -> AsyncIterator[int]:
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(("127.0.0.1", 0), ("127.0.0.1", upstream_port), ready.set_result))
    try:
        yield await asyncio.wait_for(ready, 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_bytes_written_early_arrive_unchanged_and_in_order() -> None:
    async with echo_upstream() as (up_port, _), relay_to(up_port) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Written at once, before the relay can have connected upstream: nothing may be lost.
        payload = bytes(range(256)) * 64
        writer.write(payload)
        got = await asyncio.wait_for(reader.readexactly(len(payload)), 5)
        assert got == payload
        writer.close()


async def test_large_transfer_survives_backpressure() -> None:
    # 16 MB through a reader that lags: the relay must pause and resume, not drop or reorder.
    chunk = bytes(range(251)) * 4000  # ~1 MB, a period that does not divide buffer sizes
    async with echo_upstream() as (up_port, _), relay_to(up_port) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send() -> None:
            for _ in range(16):
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(send())
        received = bytearray()
        while len(received) < 16 * len(chunk):
            received += await asyncio.wait_for(reader.read(1 << 20), 10)
            await asyncio.sleep(0)  # a slow consumer
        await sender
        assert bytes(received) == chunk * 16
        writer.close()


async def test_client_close_closes_the_upstream_connection() -> None:
    async with echo_upstream() as (up_port, closed), relay_to(up_port) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        writer.close()
        for _ in range(100):  # bounded: up to 1 s for the close to travel
            if closed:
                break
            await asyncio.sleep(0.01)
        assert closed == [1]


async def test_unreachable_upstream_closes_the_client() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    dead_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    async with relay_to(dead_port) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(10), 5) == b""  # EOF, not a hang
        writer.close()


def test_cli_refuses_a_bad_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--listen", "nonsense", "--upstream", "127.0.0.1:9092"])
    assert exit_info.value.code == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
