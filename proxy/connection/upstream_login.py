"""kqp's own SASL login to the upstream (`upstream.sasl`), as a sans-io client: frames in, frames out.

Every upstream connection kqp opens logs in first: the forwarding connections (driven by the core's
`Establishing` part in LOGGING_IN) and the control connections of `kqp.proxy.runtime.upstream_client`
(Metadata, ApiVersions, topic lookups). So clients connect without any credentials, each counted as
the user kqp knows them by, while the cluster sees kqp's one identity. The exchange is SaslHandshake
v1 then SaslAuthenticate v1: PLAIN in one token, SCRAM-SHA-256/512 in two on scramp's client, which
checks the server's final signature. `start` gives the first request frame, `receive` each next one
(None once logged in). A refusal raises `UpstreamAuthError`, naming the upstream, the mechanism and
the user, never the password; a frame that is not the awaited answer raises `ProtocolError`.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any

from scramp import ScramClient, ScramException

from kqp.config.model import UpstreamSasl
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.headers import response_correlation_id
from kqp.protocol.messages import decode_response, encode_request

__all__ = ["CLIENT_ID", "UpstreamAuthError", "UpstreamLogin"]

CLIENT_ID = "kqp"   # the client id of every request kqp sends on its own behalf
HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 1


class UpstreamAuthError(ConnectionError):
    """The upstream refused kqp's own SASL login (or proved nothing back, or never answered)."""


class Step(enum.Enum):
    """What the login awaits the answer to."""

    HANDSHAKE = "SaslHandshake"
    PLAIN = "the PLAIN token"
    CLIENT_FIRST = "SCRAM's client-first message"
    CLIENT_FINAL = "SCRAM's client-final message"
    DONE = "nothing: logged in"


class UpstreamLogin:
    """One login on one upstream connection on which nothing else has been sent yet."""

    def __init__(self, sasl: UpstreamSasl, where: str, client_id: str = CLIENT_ID) -> None:
        self.who = f"upstream {where}: SASL/{sasl.mechanism} login as {sasl.username!r}"
        self._sasl = sasl
        self._client_id = client_id
        self._ids = itertools.count(1)
        self._due = 0                     # the correlation id of the request awaiting its answer
        self.step = Step.HANDSHAKE
        self._scram: ScramClient | None = None
        self._answered: dict[Step, Callable[[memoryview], bytes | None]] = {
            Step.HANDSHAKE: self._handshake_answered,
            Step.PLAIN: self._plain_answered,
            Step.CLIENT_FIRST: self._server_first,
            Step.CLIENT_FINAL: self._server_final,
        }

    @property
    def done(self) -> bool:
        return self.step is Step.DONE

    def failed(self, why: str) -> UpstreamAuthError:
        """The login's failure for a reason its driver found (a deadline, a lost connection)."""
        return UpstreamAuthError(f"{self.who} failed: {why}")

    def start(self) -> bytes:
        """The first request frame: SaslHandshake naming the mechanism."""
        return self._request(ApiKey.SaslHandshake, HANDSHAKE_VERSION, mechanism=self._sasl.mechanism)

    def receive(self, frame: memoryview) -> bytes | None:
        """The answer to the request last sent: the next request frame, or None when logged in."""
        answered = self._answered.get(self.step)
        if answered is None:
            raise ProtocolError(f"{self.who}: the upstream sent a frame nobody asked for")
        got = response_correlation_id(frame)
        if got != self._due:
            raise ProtocolError(f"{self.who}: the upstream answered correlation id {got}, expected {self._due}")
        return answered(frame)

    # -- the steps -----------------------------------------------------------------------------
    def _request(self, api_key: int, version: int, **fields: Any) -> bytes:
        self._due = next(self._ids)
        return encode_request(api_key, version, self._due, self._client_id, **fields)

    def _authenticate(self, token: bytes, step: Step) -> bytes:
        self.step = step
        return self._request(ApiKey.SaslAuthenticate, AUTHENTICATE_VERSION, auth_bytes=token)

    def _handshake_answered(self, frame: memoryview) -> bytes:
        handshake: Any = decode_response(ApiKey.SaslHandshake, HANDSHAKE_VERSION, frame)
        if handshake.error_code:
            offered = ", ".join(handshake.mechanisms or []) or "none"
            raise self.failed(f"mechanism not enabled (error {handshake.error_code}; the upstream offers {offered})")
        sasl = self._sasl
        if sasl.mechanism == "PLAIN":
            return self._authenticate(b"\x00" + sasl.username.encode() + b"\x00" + sasl.password.encode(), Step.PLAIN)
        self._scram = ScramClient([sasl.mechanism], sasl.username, sasl.password)
        return self._authenticate(self._scram.get_client_first().encode(), Step.CLIENT_FIRST)

    def _token(self, frame: memoryview) -> bytes:
        """The server's token in a SaslAuthenticate answer; a refusal raises."""
        response: Any = decode_response(ApiKey.SaslAuthenticate, AUTHENTICATE_VERSION, frame)
        if response.error_code:
            detail = f" ({response.error_message})" if response.error_message else ""
            raise self.failed(f"error {response.error_code}{detail}")
        return bytes(response.auth_bytes or b"")

    def _plain_answered(self, frame: memoryview) -> None:
        self._token(frame)
        self.step = Step.DONE

    def _server_first(self, frame: memoryview) -> bytes:
        assert self._scram is not None
        self._scram_step(self._scram.set_server_first, self._token(frame))
        return self._authenticate(self._scram.get_client_final().encode(), Step.CLIENT_FINAL)

    def _server_final(self, frame: memoryview) -> None:
        assert self._scram is not None
        self._scram_step(self._scram.set_server_final, self._token(frame))   # the server's signature
        self.step = Step.DONE

    def _scram_step(self, take: Callable[[str], None], token: bytes) -> None:
        try:
            take(token.decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise self.failed(f"{type(exc).__name__} in the server's SCRAM messages") from None
