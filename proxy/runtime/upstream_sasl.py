"""kqp's own SASL login to the upstream (`upstream.sasl`): the client side of PLAIN and SCRAM.

Every upstream connection kqp opens runs this first, before anything else is sent on it: the
forwarding connections of `ClientEdge` (before the core hears `UpstreamConnected`) and the control
connections of `UpstreamClient` (Metadata, ApiVersions, topic lookups). So a sidecar in front of a
cluster that requires SASL lets its clients connect without any, each counted as the user kqp
terminated, while the cluster sees kqp's one identity.

The exchange is SaslHandshake v1 then SaslAuthenticate v1 (every broker since Kafka 1.0), SCRAM on
scramp's client, which also checks the server's final signature: a server that cannot prove it
knows the credential is refused. Errors name the upstream, the mechanism and the user, never the
password.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from scramp import ScramClient, ScramException

from kqp.config.model import UpstreamSasl
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.messages import decode_response, encode_request

__all__ = ["LoginReader", "UpstreamAuthError", "sasl_login"]

HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 1

Request = Callable[..., Awaitable[Any]]   # (api_key, api_version, **fields) -> the decoded response


class UpstreamAuthError(ConnectionError):
    """The upstream refused kqp's own SASL login (or proved nothing back)."""


async def sasl_login(request: Request, sasl: UpstreamSasl, where: str) -> None:
    """Log in as `sasl.username` over a connection on which nothing else has been sent yet."""
    who = f"upstream {where}: SASL/{sasl.mechanism} login as {sasl.username!r}"
    handshake = await request(ApiKey.SaslHandshake, HANDSHAKE_VERSION, mechanism=sasl.mechanism)
    if handshake.error_code:
        offered = ", ".join(handshake.mechanisms or []) or "none"
        raise UpstreamAuthError(f"{who} failed: mechanism not enabled (error {handshake.error_code}; "
                                f"the upstream offers {offered})")

    async def step(token: bytes) -> bytes:
        response = await request(ApiKey.SaslAuthenticate, AUTHENTICATE_VERSION, auth_bytes=token)
        if response.error_code:
            raise UpstreamAuthError(f"{who} failed: error {response.error_code}"
                                    f"{f' ({response.error_message})' if response.error_message else ''}")
        return bytes(response.auth_bytes or b"")

    if sasl.mechanism == "PLAIN":
        await step(b"\x00" + sasl.username.encode() + b"\x00" + sasl.password.encode())
        return
    client = ScramClient([sasl.mechanism], sasl.username, sasl.password)
    try:
        client.set_server_first((await step(client.get_client_first().encode())).decode())
        client.set_server_final((await step(client.get_client_final().encode())).decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise UpstreamAuthError(f"{who} failed: {type(exc).__name__} in the server's SCRAM messages") from None


class LoginReader:
    """The upstream socket's bytes while kqp logs in on a connection it will forward over: the edge's
    protocol feeds them here until the login is done (then nothing is left over: the upstream sends
    nothing unasked). `request` is `sasl_login`'s request function over that transport."""

    def __init__(self, transport: asyncio.WriteTransport, timeout: float, max_frame_bytes: int, client_id: str) -> None:
        self._transport, self._timeout, self._max, self._client_id = transport, timeout, max_frame_bytes, client_id
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._lost: Exception | None = None
        self._ids = itertools.count(1)

    def feed(self, data: bytes) -> None:
        self._buffer += data
        self._wake()

    def lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionError("upstream closed the connection during kqp's login")
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _frame(self) -> bytes:
        while True:
            if len(self._buffer) >= 4:
                (size,) = struct.unpack_from(">i", self._buffer)
                if size < 4 or size > self._max:
                    raise ProtocolError(f"upstream sent a frame of size {size} during kqp's login")
                if len(self._buffer) >= 4 + size:
                    frame = bytes(self._buffer[:4 + size])
                    del self._buffer[:4 + size]
                    return frame
            if self._lost is not None:
                raise self._lost
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    async def request(self, api_key: int, api_version: int, **fields: Any) -> Any:
        correlation_id = next(self._ids)
        self._transport.write(encode_request(api_key, api_version, correlation_id, self._client_id, **fields))
        frame = await asyncio.wait_for(self._frame(), self._timeout)
        return decode_response(api_key, api_version, memoryview(frame))
