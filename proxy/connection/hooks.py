"""The events a proxy session reports, for metrics and anything else that watches traffic.

Sessions call these hooks at a handful of fixed points instead of updating metrics inline, so the
forwarding path stays readable and the metrics layer can change without touching it. The base class
does nothing; `metrics.py` implements it with prometheus-client.
"""

from __future__ import annotations

from kqp.quotas.model import Principal


class ProxyObserver:
    #: Whether produce/fetch record counts are wanted even when no record quota needs them.
    wants_records: bool = False

    def connection_opened(self, listener: str) -> None: ...

    def connection_closed(self, listener: str, reason: str) -> None: ...

    def request(self, principal: Principal, api_key: int, nbytes: int) -> None: ...

    def response(self, principal: Principal, api_key: int, nbytes: int, upstream_seconds: float) -> None: ...

    def produced(self, principal: Principal, nbytes: int, records: int) -> None: ...

    def fetched(self, principal: Principal, nbytes: int, records: int) -> None: ...

    def handler_time(self, principal: Principal, seconds: float) -> None: ...

    def throttled(self, principal: Principal, quota_type: str, seconds: float) -> None: ...

    def muted(self, delta: int) -> None: ...

    def config_reload(self, result: str) -> None: ...
