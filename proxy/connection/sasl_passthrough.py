"""SASL passed through to the upstream: who the client claims to be, and when the upstream agrees.

With `sasl.mode: passthrough` SaslHandshake and SaslAuthenticate frames go upstream unchanged and the
upstream verifies; kqp watches. The handshake names the mechanism, the first SaslAuthenticate token
the user (`kqp.protocol.sasl.claimed_name`: PLAIN's authcid, SCRAM's `n=`, OAUTHBEARER's claim read
without verifying), and the claim is adopted only when the upstream's answer says the exchange is
complete and succeeded (PLAIN and OAUTHBEARER: error 0 with no challenge; SCRAM: the server-final
`v=`). A failed or unfinished exchange never grants the name (a refusal is kept, `refused`, to name
the close that follows it); a new handshake (KIP-368's re-authentication) starts over. GSSAPI and
any mechanism kqp cannot read a name from is attributed to ANONYMOUS: its principal travels
encrypted for the broker, and guessing would charge the wrong user.
"""

from __future__ import annotations

import logging

from kqp.protocol.errors import ProtocolError
from kqp.protocol.sasl import (
    claimed_name,
    decode_authenticate_request,
    decode_authenticate_response,
    decode_handshake_request,
)

__all__ = ["ClaimWatcher"]

log = logging.getLogger("kqp.connection")


class ClaimWatcher:
    """One connection's view of a SASL exchange it forwards."""

    def __init__(self, principal_claim: str) -> None:
        self.principal_claim = principal_claim
        self.mechanism: str | None = None
        self.claim: str | None = None       # who the exchange in progress is about
        self.refused: str | None = None     # the upstream's last refusal, said for the log
        self._first_token = False           # the next SaslAuthenticate carries the client's first token

    def on_request(self, authenticate: bool, version: int, body: memoryview) -> None:
        """A SASL request on its way upstream: a SaslAuthenticate (`authenticate`) or a SaslHandshake."""
        if not authenticate:
            self.mechanism, self.claim, self._first_token = decode_handshake_request(version, body), None, True
            self.refused = None
            return
        if not self._first_token or self.mechanism is None:
            return
        self._first_token = False
        try:
            self.claim = claimed_name(self.mechanism, decode_authenticate_request(version, body),
                                      self.principal_claim)
        except ProtocolError as exc:
            # The upstream will refuse what kqp cannot read; until it accepts, nobody is named.
            log.debug("SASL/%s passthrough: no name in the client's first token (%s)", self.mechanism, exc)
            self.claim = None

    def on_response(self, version: int, frame: memoryview) -> str | None:
        """The upstream's SaslAuthenticate response: the user to adopt now, or None (not yet, or never)."""
        try:
            error_code, server_token = decode_authenticate_response(version, frame)
        except ProtocolError:
            self.claim = None
            return None
        if error_code != 0:
            self.refused = f"the upstream refused SASL/{self.mechanism} login as {self.claim!r} (error {error_code})"
            self.claim = None
            return None
        mechanism = (self.mechanism or "").upper()
        if mechanism.startswith("SCRAM-"):
            complete = server_token.startswith(b"v=")
        else:
            complete = mechanism in ("PLAIN", "OAUTHBEARER") and not server_token
        if not complete:
            return None
        claim, self.claim = self.claim, None
        return claim
