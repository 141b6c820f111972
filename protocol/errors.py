"""Errors raised by kqp's wire codec.

Every exception here means "this peer sent bytes kqp cannot accept". The proxy layer catches
:class:`ProtocolError` (and its subclasses) per connection, logs it and closes that one connection;
nothing in ``protocol/`` ever closes anything itself. Keeping the taxonomy this small is deliberate
(h11's ``RemoteProtocolError``): callers need one except clause for "the peer is wrong", and anything
else escaping the codec is a bug in kqp, to be handled by the connection's top-level guard.
"""

from __future__ import annotations

__all__ = ["FrameTooLarge", "ProtocolError", "UnsupportedApi"]


class ProtocolError(Exception):
    """A peer's bytes kqp cannot accept: truncated, malformed or out of range.

    The connection that produced them must be closed; other connections are unaffected.
    """


class FrameTooLarge(ProtocolError):
    """A frame's size prefix is above the configured maximum (Kafka's ``socket.request.max.bytes``).

    Raised as soon as the 4-byte prefix is seen, before any of the body is awaited, so a peer
    cannot make kqp buffer an arbitrarily large frame.
    """


class UnsupportedApi(ProtocolError):
    """A request for an api key kqp does not know, or a version outside what kqp can decode.

    kqp only advertises (through its own ApiVersions answer) what it can decode, so a
    well-behaved client never triggers this.
    """


class BodyError(ProtocolError, ValueError):
    """A request or response body that does not parse as its API and version say it should."""
