"""Who a TLS client is, and, when a listener refuses one, why.

After the handshake the edge asks :class:`PeerIdentity` for the client's user: its certificate's
subject as Kafka renders it (:mod:`kqp.proxy.tls.x500_name`), mapped by the configured
`principal_mapping_rules`. No certificate (client_auth `requested` or `none`) is `ANONYMOUS`, as
Kafka's `DefaultKafkaPrincipalBuilder` has it; a subject no rule maps is refused, as Kafka refuses it.

A handshake that fails is refused too, and :func:`handshake_refusal` says why in two words: the
metrics label (`reason`, one of `REFUSAL_REASONS`) and the cause written to the log, which is
also what the log's once-a-second limit is kept per. A client that simply goes away mid-handshake
(a TCP health check does) is counted as `client_closed`, as on a plaintext listener, and not warned of.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from kqp.proxy.connection.events import REFUSAL_REASONS
from kqp.quotas.model import ANONYMOUS
from kqp.quotas.principal_mapping import NoMatchingRule, PrincipalMapper

from .x500_name import CertificateFormatError, subject_name

__all__ = ["PeerIdentity", "Refusal", "Refused", "handshake_refusal"]

# OpenSSL's verify code for an expired certificate (X509_V_ERR_CERT_HAS_EXPIRED).
_CERT_HAS_EXPIRED = 10
# What OpenSSL says when the first bytes are not a TLS record: a plaintext client.
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "PACKET_LENGTH_TOO_LONG", "RECORD_LENGTH_MISMATCH", "UNEXPECTED_RECORD"})


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str          # the kqp_connections_closed_total label
    cause: str           # what the log says
    warn: bool = True    # False: not worth a warning (a client that left), logged at debug level

    def __post_init__(self) -> None:
        assert self.reason in (*REFUSAL_REASONS, "client_closed"), self.reason


class Refused(Exception):   # a refusal of the peer, not an error of kqp's
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.cause)
        self.refusal = refusal


class PeerIdentity:
    """Certificate (DER) to user, by Kafka's rules."""

    def __init__(self, rules: PrincipalMapper) -> None:
        self.rules = rules

    def user(self, certificate: bytes | None) -> str:
        if not certificate:
            return ANONYMOUS
        try:
            subject = subject_name(certificate)
        except CertificateFormatError as exc:
            raise Refused(Refusal("tls_principal_unmapped", f"unreadable client certificate subject: {exc}")) from None
        try:
            user = self.rules.name(subject)
        except NoMatchingRule:
            raise Refused(Refusal("tls_principal_unmapped",
                                  f"no principal_mapping_rules rule applies to {subject!r}")) from None
        if not user:
            # An empty user would be no entity at all (and Kafka's quota paths cannot name it).
            raise Refused(Refusal("tls_principal_unmapped", f"{subject!r} maps to an empty user"))
        return user


def handshake_refusal(exc: BaseException) -> Refusal:
    """Why a listener's TLS handshake failed, from what the event loop raised."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code == _CERT_HAS_EXPIRED:
            return Refusal("tls_certificate_expired", "client certificate has expired")
        return Refusal("tls_certificate_rejected", f"client certificate rejected: {exc.verify_message or exc.reason}")
    if isinstance(exc, ssl.SSLError):
        if exc.reason in _NOT_TLS:
            return Refusal("tls_plaintext", "not TLS (a plaintext client on a TLS listener?)")
        if exc.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return Refusal("tls_certificate_rejected", "no client certificate (client_auth: required)")
        return Refusal("tls_handshake_failed", f"TLS handshake failed: {exc.reason or exc}")
    if isinstance(exc, TimeoutError) or "taking longer" in str(exc):
        return Refusal("tls_handshake_failed", "TLS handshake timed out")
    if isinstance(exc, ConnectionError):
        # Gone before the handshake finished: a TCP health check, a client giving up. As on a
        # plaintext listener, that is a client closing, not a refusal.
        return Refusal("client_closed", "the client closed the connection during the TLS handshake", warn=False)
    return Refusal("tls_handshake_failed", f"TLS handshake failed: {type(exc).__name__}: {exc}")
