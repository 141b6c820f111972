"""What goes into a connection's core (events) and what comes out of it (actions).

The core (:mod:`kqp.proxy.connection.core`) is a sans-io state machine in the manner of h11 and
mitmproxy's proxy layers: the asyncio edge turns each transport callback into one event, hands it
to ``Connection.handle``, and carries out the actions it returns, in order. Nothing here touches a
socket or reads a clock: an event carries the loop time it happened at (``now``, seconds on a
monotonic clock), so a playbook test can replay a whole exchange with plain numbers.

Events and actions are small frozen values compared by content, so a test states an exchange as
``[(event, [expected actions]), ...]``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kqp.protocol.addresses import BrokerAddress
from kqp.quotas.acls.admin_layer import AclChange
from kqp.quotas.admin_layer import Change
from kqp.quotas.connection_limits import LIMIT_REASONS

Buffer = bytes | bytearray | memoryview   # a bytearray or a view: read in place, never written again
Parts = tuple[Buffer, ...]


class Side(enum.Enum):
    """Which socket of a connection pair an action or a mute is about."""

    CLIENT = "client"
    UPSTREAM = "upstream"

    # Members are singletons, equal only to themselves: identity hashes them in C, where Enum's own
    # hash is a Python call on every set and dict look-up (several an exchange, on the hot path).
    __hash__ = object.__hash__


class MuteReason(enum.Enum):
    """Why a socket is not being read. Each reason is independent (aiohttp's two pause flags, Kafka's
    ChannelMuteState): reading resumes only when no reason is left on that side, so one reason can
    never resume what another paused."""

    THROTTLED = "throttled"              # KIP-219: until the delay queue fires
    RESPONSE_PENDING = "response_pending"  # a response-time quota: one request at a time, as a broker reads
    BACKPRESSURE = "backpressure"        # the upstream's write buffer is over its high-water mark
    CONNECTING = "connecting"            # the upstream connection is not established (or logged in) yet
    LOOKUP = "lookup"                    # a mutation request waits for topic metadata (KIP-599 costs)
    COMMIT = "commit"                    # an admin API answer waits for its state file's commit
    CLOSING = "closing"                  # shutdown: read no new requests, let owed responses drain
    CLIENT_SLOW = "client_slow"          # the client's write buffer is full: stop reading the upstream
    LISTENERS = "listeners"              # a response names a broker kqp has no listener for yet
    IN_FLIGHT = "in_flight"              # limits.max_in_flight_per_connection requests await responses

    __hash__ = object.__hash__   # as Side's

    @property
    def side(self) -> Side:
        return Side.UPSTREAM if self in UPSTREAM_REASONS else Side.CLIENT


#: The reasons that stop reading the upstream (responses); every other one stops reading the client.
UPSTREAM_REASONS = frozenset({MuteReason.CLIENT_SLOW, MuteReason.LISTENERS})


# -- events -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConnected:
    """The client's connection is up; ``user`` is its principal when the edge knows one (a TLS
    client certificate, mapped), None for ANONYMOUS; ``host`` its IP, as ACLs name hosts."""

    now: float
    user: str | None = None
    host: str = ""


@dataclass(frozen=True, slots=True)
class UpstreamConnected:
    """The upstream socket is up (its TLS handshake done); ``address`` names it in log lines."""

    now: float
    address: str = "?"


@dataclass(frozen=True, slots=True)
class UpstreamConnectFailed:
    now: float
    message: str
    unknown_broker: bool = False   # kqp knows no address for the listener's broker


# The three made for every read and every write are not frozen: a frozen dataclass's __init__ costs
# twice as much, and nothing writes them after they are made.
@dataclass(slots=True)
class ClientData:
    """Bytes from the client: the bytes, or (a read in place) how many landed where the core's reader said."""

    now: float
    data: Buffer | int


@dataclass(slots=True)
class UpstreamData:
    """Bytes from the upstream, as `ClientData`."""

    now: float
    data: Buffer | int


@dataclass(frozen=True, slots=True)
class ClientEof:
    """The client half-closed: it sends nothing more, but may still read what it is owed."""

    now: float


@dataclass(frozen=True, slots=True)
class ClientLost:
    now: float


@dataclass(frozen=True, slots=True)
class UpstreamLost:
    now: float
    message: str | None = None


@dataclass(frozen=True, slots=True)
class WriteBuffer:
    """The write buffer towards ``side`` went over (``full``) or back under its mark."""

    now: float
    side: Side
    full: bool


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The connection's timer (`SetTimer`) is due. The edge adds what it sees of the muted client's
    socket without reading it: ``unread``, the bytes that arrived since the last `NoteUnread` (None:
    none asked, or the socket cannot say), and ``client_gone``, the client has closed or reset it."""

    now: float
    unread: int | None = None
    client_gone: bool = False


@dataclass(frozen=True, slots=True)
class TopicsLookedUp:
    """The topic lookup a ``LookUpTopics`` action asked for has finished (well or not)."""

    now: float


@dataclass(frozen=True, slots=True)
class ListenersReady:
    """The answer to ``EnsureListeners``: kqp listens for those brokers now, or ``error`` says which
    it could not listen for and why."""

    now: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The answer to ``CommitQuotas`` or ``CommitAcls``: the change is written and in force, or ``error``
    says why nothing changed."""

    now: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShutdownBegun:
    """Stop reading requests; what is owed still goes out, then the core closes itself (``shutdown``)."""

    now: float


@dataclass(frozen=True, slots=True)
class IdleCheck:
    """The process's periodic look: the core closes itself (``idle``) when no whole request was read
    and no response sent for longer than ``connections_max_idle_ms``, muted or not."""

    now: float


@dataclass(frozen=True, slots=True)
class CloseRequested:
    """The process closes this connection (shutdown's grace time is over)."""

    now: float
    reason: str
    message: str | None = None


Event = (ClientConnected | UpstreamConnected | UpstreamConnectFailed | ClientData | UpstreamData | ClientEof
         | ClientLost | UpstreamLost | WriteBuffer | TimerFired | TopicsLookedUp | ListenersReady | Committed
         | ShutdownBegun | IdleCheck | CloseRequested)


# -- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectUpstream:
    """Open the upstream connection for this listener's broker (``node_id`` None: any broker)."""

    node_id: int | None


@dataclass(slots=True)   # not frozen: see ClientData
class Send:
    """Write ``parts`` (whose concatenation is one or more whole frames) to ``side``, in one go."""

    side: Side
    parts: Parts

    def __eq__(self, other: object) -> bool:   # by bytes: a memoryview and its bytes are the same send
        if not isinstance(other, Send):
            return NotImplemented
        return self.side is other.side and b"".join(self.parts) == b"".join(other.parts)

    def __hash__(self) -> int:
        return hash((self.side, b"".join(self.parts)))

    def __repr__(self) -> str:
        size = sum(len(p) for p in self.parts)
        return f"Send({self.side.name}, {size} bytes in {len(self.parts)} part(s))"


@dataclass(frozen=True, slots=True)
class Mute:
    reason: MuteReason


@dataclass(frozen=True, slots=True)
class Unmute:
    reason: MuteReason


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Fire ``TimerFired`` at ``at`` (loop time); replaces the connection's earlier timer. None: no timer."""

    at: float | None


@dataclass(frozen=True, slots=True)
class NoteUnread:
    """Note how many bytes the client has sent that kqp has not read: `TimerFired.unread` counts from
    here (a throttled response has just gone out: whether the client backs off, backoff.py)."""


@dataclass(frozen=True, slots=True)
class LookUpTopics:
    """Refresh the topic cache from the upstream, then send ``TopicsLookedUp``."""


@dataclass(frozen=True, slots=True)
class EnsureListeners:
    """Listen for these brokers (bind their listeners, record their upstream addresses), then send
    ``ListenersReady``: a response names them and waits, unrewritten, until kqp has a port for each."""

    brokers: tuple[BrokerAddress, ...]


@dataclass(frozen=True, slots=True)
class CommitQuotas:
    """Write these quota changes to the state file and put them in force, then send ``Committed``.
    ``who`` is the principal that asked (Kafka's form, ``User:ops``), for the log and an audit trail."""

    changes: tuple[Change, ...]
    who: str


@dataclass(frozen=True, slots=True)
class CommitAcls:
    """Write these ACL changes (`kqp.quotas.acls.admin_layer.AclChange`) to the ACL state file and put them in
    force, then send ``Committed``; ``who`` as for ``CommitQuotas``."""

    changes: tuple[AclChange, ...]
    who: str


@dataclass(frozen=True, slots=True)
class Close:
    """Close both sockets. ``reason`` is a metrics label; ``message`` is logged when set."""

    reason: str
    message: str | None = None


Action = (ConnectUpstream | Send | Mute | Unmute | SetTimer | NoteUnread | LookUpTopics | EnsureListeners | CommitQuotas
          | CommitAcls | Close)

#: Why a listener refused a client before its connection began (a load balancer's PROXY header, a TLS
#: listener's handshake and identity checks, and `limits:`; the core never sees these connections).
PROXY_HEADER_REASONS = ("proxy_header_untrusted", "proxy_header_malformed", "proxy_header_missing",
                        "proxy_header_timeout")
REFUSAL_REASONS = ("tls_plaintext", "tls_certificate_expired", "tls_certificate_rejected", "tls_handshake_failed",
                   "tls_principal_unmapped", *LIMIT_REASONS, *PROXY_HEADER_REASONS)

#: Every reason a connection closes with, as counted in ``kqp_connections_closed_total``.
CLOSE_REASONS = ("client_closed", "idle", "shutdown", "protocol_error", "internal_error", "upstream_closed",
                 "upstream_unreachable", "upstream_unknown", "upstream_protocol_error", "upstream_auth_failed",
                 "listener_unavailable", "authentication_failed", "authentication_required", "authorization_failed",
                 "session_expired", *REFUSAL_REASONS)
