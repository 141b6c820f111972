"""kqp's own small Kafka client, for the control requests it sends itself (ApiVersions, Metadata).

Not on the forwarding path: client traffic goes through the connection core as opaque frames. This
client uses asyncio streams and kqp's codec, one request at a time, with a deadline on every step
(the TLS handshake, with `upstream.tls`, included in the connect deadline). With `upstream.sasl` set
it logs in first, driving the connection core's sans-io login (`kqp.proxy.connection.upstream_login`,
the one implementation of the exchange) with its own request/response.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Callable
from typing import Any

from kqp.config.model import UpstreamSasl
from kqp.protocol.errors import ProtocolError
from kqp.protocol.messages import decode_response, encode_request
from kqp.proxy.connection.upstream_login import CLIENT_ID, UpstreamLogin

from .cert_reload import no_tls

__all__ = ["CLIENT_ID", "UpstreamClient"]


class UpstreamClient:
    """One connection to one upstream broker."""

    def __init__(self, host: str, port: int, timeout: float, max_frame_bytes: int = 100 * 1024 * 1024,
                 *, tls: Callable[[str], dict[str, Any]] = no_tls, sasl: UpstreamSasl | None = None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._tls = tls
        self._max = max_frame_bytes
        self._sasl = sasl
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> UpstreamClient:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, **self._tls(self.host)), self.timeout
        )
        if self._sasl is not None:
            try:
                await self._log_in(UpstreamLogin(self._sasl, f"{self.host}:{self.port}"))
            except BaseException:
                await self.__aexit__()
                raise
        return self

    async def _log_in(self, login: UpstreamLogin) -> None:
        frame: bytes | None = login.start()
        while frame is not None:
            frame = login.receive(await self._exchange(frame))

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
            except (OSError, TimeoutError):
                pass

    async def _exchange(self, request: bytes) -> memoryview:
        """Send one whole request frame, return the next whole response frame (size prefix included)."""
        assert self._reader is not None and self._writer is not None, "use as an async context manager"
        if self._writer.is_closing():   # the upstream hung up (uvloop raises RuntimeError on a write then)
            raise ConnectionResetError(f"upstream {self.host}:{self.port} closed the connection")
        self._writer.write(request)
        await asyncio.wait_for(self._writer.drain(), self.timeout)
        head = await asyncio.wait_for(self._reader.readexactly(4), self.timeout)
        (size,) = struct.unpack(">i", head)
        if size < 4 or size > self._max:
            raise ProtocolError(f"upstream {self.host}:{self.port} sent a frame of size {size}")
        return memoryview(head + await asyncio.wait_for(self._reader.readexactly(size), self.timeout))

    async def request_frame(self, api_key: int, api_version: int, **fields: Any) -> memoryview:
        """Send one request, return the whole response frame (with its size prefix)."""
        correlation_id = next(self._ids)
        frame = await self._exchange(encode_request(api_key, api_version, correlation_id, CLIENT_ID, **fields))
        (got,) = struct.unpack_from(">i", frame, 4)
        if got != correlation_id:
            raise ProtocolError(f"upstream {self.host}:{self.port} answered correlation id {got}, "
                                f"expected {correlation_id}")
        return frame

    async def request(self, api_key: int, api_version: int, **fields: Any) -> Any:
        frame = await self.request_frame(api_key, api_version, **fields)
        return decode_response(api_key, api_version, frame)
