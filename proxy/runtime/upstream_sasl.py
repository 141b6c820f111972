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

from collections.abc import Awaitable, Callable
from typing import Any

from scramp import ScramClient, ScramException

from kqp.config.model import UpstreamSasl
from kqp.protocol.apis import ApiKey

__all__ = ["UpstreamAuthError", "sasl_login"]

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
