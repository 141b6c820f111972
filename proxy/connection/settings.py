"""The settings a connection reads, as one immutable value: a live reload replaces it whole.

The server builds it from the config (`kqp.proxy.runtime.server.core_settings`) and assigns the new
one to `CoreWiring.settings` on a reload, so every connection sees the change at its next event and
no connection ever sees half of one. It has a module of its own because both the core and the API
handlers read it, and the handlers sit below `CoreWiring` in the import order.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoreSettings"]


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """What a connection reads from the config; replaced whole on a live reload."""

    max_frame_bytes: int
    fetch_throttle: str = "deliver"   # "deliver" | "empty" (DESIGN.md: Fetch over quota)
    max_in_flight: int | None = None  # limits.max_in_flight_per_connection: stop reading at this many
    connections_max_idle_ms: int = 600_000   # close a connection idle this long (Kafka's default: 10 min)
    connect_timeout_ms: int = 10_000   # upstream.connect_timeout_ms: for the connection, then for kqp's login
    # quotas.pacing: mute a client that does not back off for its request's cost, not the
    # whole throttle. The config's default is on; this value's default is the broker's behaviour.
    pacing: bool = False
