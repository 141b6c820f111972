"""A read-only view of one open connection, for whoever reports on connections.

The metrics (which client libraries honour throttles, `kqp_client_connections`) and `kqp explain`
(an entity's connections) read the open connections the server keeps, through `connection_view`:
the few facts they show, copied out of the core, so observability never reaches into a core's or an
edge's state and a view taken on the loop's thread can be used after it. Nothing here changes a
connection.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backoff import UNKNOWN
from .core import Connection

__all__ = ["ConnectionView", "connection_view"]


@dataclass(frozen=True, slots=True)
class ConnectionView:
    peer: str
    listener: str
    user: str
    client_ids: tuple[str, ...]     # the client ids its requests named (at most MAX_CLIENT_IDS)
    software: str                   # KIP-511's client_software_name, or "unknown"
    software_version: str           # KIP-511's version, or the API and version it was throttled on
    honours_throttles: str          # "yes", "no" or "unknown" (backoff.py)
    why_not: str | None             # when "no": "version" or "observed"
    muted_seconds: float            # how much longer its current throttle mutes it (0: not muted)
    phase: str


def connection_view(core: Connection, now: float) -> ConnectionView:
    """What `core` shows of itself at `now`."""
    throttling = core.throttling
    backoff = throttling.backoff
    software, version = backoff.software if backoff is not None else ("unknown", "-")
    return ConnectionView(
        peer=core.peer, listener=core.listener, user=core.user,
        client_ids=tuple(sorted(c for c in core.auth.principals if c is not None)),
        software=software, software_version=version,
        honours_throttles=backoff.verdict if backoff is not None else UNKNOWN,
        why_not=backoff.reason if backoff is not None else None,
        muted_seconds=max(0.0, throttling.muted_until - now) if throttling.muted else 0.0,
        phase=core.phase.value,
    )
