"""The events a connection reports, for metrics and anything else that watches traffic.

The core calls these hooks at a handful of fixed points instead of updating metrics inline, so the
forwarding path stays readable and the metrics layer (`kqp.proxy.observability`) can change
without touching it. The base class does nothing.
"""

from __future__ import annotations

from kqp.quotas.model import Principal, QuotaType


class ProxyObserver:
    #: Whether produce/fetch record counts are wanted even when no record quota needs them.
    wants_records: bool = False
    #: Whether every Produce's and Fetch response's bytes per topic are wanted (`topic_bytes`).
    wants_topics: bool = False

    def connection_opened(self, listener: str) -> None: ...

    def connection_closed(self, listener: str, reason: str) -> None: ...

    def connection_refused(self, listener: str, reason: str) -> None:
        """A listener refused a client before its connection began (a failed TLS handshake, an
        unmapped certificate): counted with the closes, never among the open connections."""

    def request(self, principal: Principal, api_key: int, nbytes: int) -> None: ...

    def response(self, principal: Principal, api_key: int, nbytes: int, upstream_seconds: float) -> None: ...

    def produced(self, principal: Principal, nbytes: int, records: int) -> None: ...

    def fetched(self, principal: Principal, nbytes: int, records: int) -> None: ...

    def topic_bytes(self, principal: Principal, direction: str, sizes: tuple[tuple[str, int], ...]) -> None:
        """A Produce request's (`produce`) or a Fetch response's (`fetch`) records bytes per topic."""

    def handler_time(self, principal: Principal, seconds: float) -> None: ...

    def throttled(self, principal: Principal, quota_type: QuotaType, seconds: float) -> None: ...

    def observed_throttled(self, principal: Principal, quota_type: QuotaType, seconds: float) -> None:
        """A request would have been throttled for `seconds` had `principal`'s observed `quota_type`
        been enforced (`mode: observe`): counted only, nothing was told or muted."""

    def mute_started(self, principal: Principal, quota_type: QuotaType, at: float | None = None) -> None:
        """A connection was muted by a throttle that `principal`'s `quota_type` caused, from `at`
        (the loop time it was decided; None: now)."""

    def mute_ended(self, principal: Principal, quota_type: QuotaType, due: float | None = None) -> None:
        """That mute ended (the throttle passed, or the connection closed). `due`: the loop time the
        throttle let go, when the timer that says so fired later than that (a busy loop); None: now."""

    def throttle_ignored(self, software: str, version: str, reason: str) -> None:
        """A throttle was given to a client that does not back off by itself (backoff.py): ``reason``
        ``version`` (its request's version has no client-side throttling, or no response) or
        ``observed`` (it was seen sending while throttled); ``software`` and ``version`` are KIP-511's
        names, or ``unknown`` and the request's API and version."""

    def requests_dropped(self, count: int) -> None:
        """Requests read but not forwarded were dropped: their client closed its connection (giving_up.py)."""

    def upstream_anomaly(self, kind: str) -> None:
        """An upstream answer kqp let pass without its usual handling: ``unawaited`` (a response to
        no request in flight, dropped) or ``unreadable`` (a response whose throttle_time_ms kqp
        could not reach, forwarded as the upstream sent it)."""

    def config_reload(self, result: str) -> None: ...
