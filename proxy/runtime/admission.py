"""The listeners' door: each new client connection is checked against `limits:` before kqp serves it.

`quotas.connection_limits.ConnectionLimits` does the counting; this module carries its verdicts
out. An admitted connection gets a `Slot`, released once when the connection ends (idempotent, so
the TLS listener, whose handshake may fail after admission, and the edge can both hold it). A
refused one is counted in `kqp_connections_closed_total{reason}` and logged at most once a second
per cause (`RefusalLog`), and closed: at once, or, over `connection_creation_rate_per_ip`, after
the throttle, as Kafka's acceptor does (its `throttledSockets`): the socket is held unread until
then. Held sockets are capped (`MAX_HELD`): past that a refused connection is closed at once, so a
flood cannot pin file descriptors.

The limits are per process: under `kqp run --workers N` each worker counts its own connections.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Callable

from kqp.config.model import ProxyConfig
from kqp.proxy.tls.peers import Refusal
from kqp.quotas.connection_limits import ConnectionLimits, LimitSettings

MAX_HELD = 1000   # refused sockets held open for their throttle at once

Close = Callable[[], None]


def limit_settings(config: ProxyConfig) -> LimitSettings:
    limits, quotas = config.limits, config.quotas
    return LimitSettings(limits.max_connections, limits.max_connections_per_ip,
                         limits.connection_creation_rate_per_ip, quotas.window_size_seconds, quotas.window_count)


def peer_name(peer: object) -> str:
    """A peername as logs and refusals show it: `host:port`."""
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


def peer_ip(peer: object) -> str:
    """The IP a limit is kept per: an IPv4-mapped IPv6 address counts as its IPv4 address."""
    return _canonical_ip(str(peer[0]) if isinstance(peer, tuple) and peer else str(peer))


@functools.lru_cache(maxsize=4096)
def _canonical_ip(host: str) -> str:
    """Parsed once per address: clients come back from the same few, and parsing cost a short-lived
    connection more than the rest of its admission."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host   # a Unix socket or the like: one "IP"
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


class Slot:
    """One admitted connection's place in the counts."""

    __slots__ = ("_admission", "ip")

    def __init__(self, admission: Admission, ip: str) -> None:
        self._admission: Admission | None = admission
        self.ip = ip

    def release(self) -> None:
        if self._admission is not None:
            self._admission.limits.release(self.ip)
            self._admission = None


class Admission:
    def __init__(self, loop: asyncio.AbstractEventLoop, limits: ConnectionLimits,
                 refused: Callable[[str, str, Refusal], None]) -> None:
        self._loop = loop
        self.limits = limits
        self._refused = refused
        self._held: dict[int, tuple[asyncio.TimerHandle, Close]] = {}
        self._ids = 0

    def admit(self, listener: str, peer: object, close: Close) -> Slot | None:
        """A slot for the connection from `peer` (a peername), or None: refused, and `close` is
        called (now or after the throttle)."""
        ip = peer_ip(peer)
        denied = self.limits.admit(ip, self._loop.time())
        if denied is None:
            return Slot(self, ip)
        shown = peer_name(peer)
        if denied.delay > 0 and len(self._held) < MAX_HELD:
            self._hold(close, denied.delay)
            self._refused(listener, shown, Refusal(denied.reason, f"{denied.cause}: closed after the throttle"))
        else:
            close()
            self._refused(listener, shown, Refusal(denied.reason, denied.cause))
        return None

    def _hold(self, close: Close, delay: float) -> None:
        self._ids += 1
        key = self._ids

        def due() -> None:
            self._held.pop(key, None)
            close()

        self._held[key] = (self._loop.call_later(delay, due), close)

    @property
    def held(self) -> int:
        return len(self._held)

    def close(self) -> None:
        """Shutdown: close every held socket now."""
        for handle, close in self._held.values():
            handle.cancel()
            close()
        self._held.clear()
