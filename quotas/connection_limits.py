"""Connection limits: how many connections kqp holds, per process and per client IP, and how fast
one IP may open them. Pure accounting with an explicit clock, like the rest of `quotas/`.

Kafka's `SocketServer.ConnectionQuotas` (KIP-612) is the model, check for check: the process count
(`max.connections`), then the IP's creation rate (a sampled rate over the quota windows; a
connection over it is closed after the throttle ``(O - T) / T * W`` capped at one window, and
un-recorded, so refused attempts do not keep the IP over), then the IP's count
(`max.connections.per.ip`). Where Kafka's acceptor blocks while the process is full, kqp refuses the
newcomer at once: its client retries with its backoff instead of waiting in the kernel's backlog.

None means no limit. `admit` either counts the connection (the caller then owes exactly one
`release`) or says why not. Per-IP rates are dropped once their samples have all expired.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqp.quotas.rates.sampled_rate import SampledRate
from kqp.quotas.rates.throttle import capped, throttle_ms, throttle_seconds

# The refusal reasons, as kqp_connections_closed_total{reason} names them.
MAX_CONNECTIONS = "max_connections"
MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
CREATION_RATE = "connection_creation_rate"
LIMIT_REASONS = (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP, CREATION_RATE)


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """The `limits:` section's connection limits (None: no limit) and the quota windows."""

    max_connections: int | None = None
    max_connections_per_ip: int | None = None
    connection_creation_rate_per_ip: float | None = None   # connections per second
    window_size_seconds: float = 1.0
    window_count: int = 11


@dataclass(frozen=True, slots=True)
class Denied:
    """Why a connection is not served, and after how long it is closed (0: at once)."""

    reason: str        # one of LIMIT_REASONS
    cause: str         # the log's wording, the same for every refusal of this cause
    delay: float = 0.0


class ConnectionLimits:
    def __init__(self, settings: LimitSettings) -> None:
        self.settings = settings
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._rates: dict[str, SampledRate] = {}
        self._last_seen: dict[str, float] = {}
        self._next_sweep = float("-inf")

    def update(self, settings: LimitSettings) -> None:
        """New limits (a live reload). Open connections stay; new windows restart the rates, and a
        lifted creation rate drops them (only `_record_rate` sweeps, and it no longer runs)."""
        windows = (settings.window_size_seconds, settings.window_count)
        if settings.connection_creation_rate_per_ip is None or \
                windows != (self.settings.window_size_seconds, self.settings.window_count):
            self._rates.clear()
            self._last_seen.clear()
        self.settings = settings

    def admit(self, ip: str, now: float) -> Denied | None:
        """None: the connection is counted (release it once when it ends). Else why it is refused."""
        s = self.settings
        if s.max_connections is not None and self.total >= s.max_connections:
            return Denied(MAX_CONNECTIONS, f"kqp already holds max_connections={s.max_connections} connections")
        if s.connection_creation_rate_per_ip is not None:
            delay = self._record_rate(ip, s.connection_creation_rate_per_ip, now)
            if delay > 0:
                return Denied(CREATION_RATE, "connections from one IP over connection_creation_rate_per_ip="
                                             f"{s.connection_creation_rate_per_ip:g}/s", delay)
        count = self.per_ip.get(ip, 0)
        if s.max_connections_per_ip is not None and count >= s.max_connections_per_ip:
            return Denied(MAX_CONNECTIONS_PER_IP, f"the client's IP already holds "
                                                  f"max_connections_per_ip={s.max_connections_per_ip} connections")
        self.per_ip[ip] = count + 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        count = self.per_ip.get(ip, 0)
        assert count > 0 and self.total > 0, f"released a connection from {ip} that was never admitted"
        if count == 1:
            del self.per_ip[ip]
        else:
            self.per_ip[ip] = count - 1
        self.total -= 1

    def _record_rate(self, ip: str, bound: float, now: float) -> float:
        """Record one connection from `ip`; the throttle (seconds) if that takes it over `bound`,
        in which case the connection is un-recorded again (Kafka's `recordIpConnectionMaybeThrottle`)."""
        s = self.settings
        self._sweep(now)
        rate = self._rates.get(ip)
        if rate is None:
            rate = self._rates[ip] = SampledRate(s.window_size_seconds, s.window_count)
        self._last_seen[ip] = now
        rate.record(1.0, now)
        observed, window = rate.observe(now)
        delay = capped(throttle_seconds(observed, bound, window), s.window_size_seconds)
        if not throttle_ms(delay):   # Kafka throttles in whole milliseconds, and only above 0
            return 0.0
        rate.record(-1.0, now)
        return delay

    def _sweep(self, now: float) -> None:
        """Forget IPs whose every sample has expired (their rate reads 0 anyway): once a window."""
        if now < self._next_sweep:
            return
        s = self.settings
        self._next_sweep = now + s.window_size_seconds
        horizon = s.window_count * s.window_size_seconds
        for ip in [ip for ip, seen in self._last_seen.items() if now - seen >= horizon]:
            del self._last_seen[ip], self._rates[ip]

    @property
    def tracked_ips(self) -> int:
        """IPs with a creation rate held (bounded by the IPs seen in the last window_count windows)."""
        return len(self._rates)
