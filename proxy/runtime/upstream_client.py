"""kqp's own small Kafka client, for the control requests it sends itself (ApiVersions, Metadata).

Not on the forwarding path: client traffic goes through the connection core as opaque frames. This
client uses asyncio streams and kqp's codec, one request at a time, with a deadline on every step
(the TLS handshake, with `upstream.tls`, included in the connect deadline). With `upstream.sasl` set
it logs in first (`upstream_sasl.py`).
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

from .cert_reload import no_tls
from .upstream_sasl import sasl_login

CLIENT_ID = "kqp"


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
                await sasl_login(self.request, self._sasl, f"{self.host}:{self.port}")
            except BaseException:
                await self.__aexit__()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
            except (OSError, TimeoutError):
                pass

    async def request_frame(self, api_key: int, api_version: int, **fields: Any) -> memoryview:
        """Send one request, return the whole response frame (with its size prefix)."""
        assert self._reader is not None and self._writer is not None, "use as an async context manager"
        correlation_id = next(self._ids)
        self._writer.write(encode_request(api_key, api_version, correlation_id, CLIENT_ID, **fields))
        await asyncio.wait_for(self._writer.drain(), self.timeout)
        head = await asyncio.wait_for(self._reader.readexactly(4), self.timeout)
        (size,) = struct.unpack(">i", head)
        if size < 4 or size > self._max:
            raise ProtocolError(f"upstream {self.host}:{self.port} sent a frame of size {size}")
        body = await asyncio.wait_for(self._reader.readexactly(size), self.timeout)
        (got,) = struct.unpack_from(">i", body, 0)
        if got != correlation_id:
            raise ProtocolError(f"upstream {self.host}:{self.port} answered correlation id {got}, "
                                f"expected {correlation_id}")
        return memoryview(head + body)

    async def request(self, api_key: int, api_version: int, **fields: Any) -> Any:
        frame = await self.request_frame(api_key, api_version, **fields)
        return decode_response(api_key, api_version, frame)
