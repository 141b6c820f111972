"""Clients a listener refuses: each one counted, and logged at most once a second per cause.

A plaintext client retrying in a loop, a fleet whose certificates expired overnight, or a flood of
connections over `limits:` would otherwise write a log line per attempt. TLS refusals log as
`kqp.tls`, limit refusals as `kqp.limits`, each with its own once-a-second budget per cause. Every refusal is counted
(`kqp_connections_closed_total{reason}`); the log says the first of a cause at once and then at
most one line a second for it, with how many more there were in between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.tls.peers import Refusal

log = logging.getLogger("kqp.tls")

LOG_INTERVAL_SECONDS = 1.0
_MAX_CAUSES = 1000   # causes remembered (a subject no rule maps is a cause of its own)


class RefusalLog:
    def __init__(self, observer: ProxyObserver, clock: Callable[[], float],
                 interval: float = LOG_INTERVAL_SECONDS, logger: logging.Logger = log) -> None:
        self._log = logger
        self._observer = observer
        self._clock = clock
        self._interval = interval
        self._last: dict[str, tuple[float, int]] = {}   # cause -> (last logged at, refused since)

    def __call__(self, listener: str, peer: str, refusal: Refusal) -> None:
        self._observer.connection_refused(listener, refusal.reason)
        if not refusal.warn:
            self._log.debug("client %s on %s: %s", peer, listener, refusal.cause)
            return
        now = self._clock()
        last = self._last.get(refusal.cause)
        if last is not None and now - last[0] < self._interval:
            self._last[refusal.cause] = (last[0], last[1] + 1)
            return
        more = f" ({last[1]} more refused for this since the last report)" if last and last[1] else ""
        self._log.warning("refused client %s on %s: %s%s", peer, listener, refusal.cause, more)
        if last is None and len(self._last) >= _MAX_CAUSES:
            self._forget(now)
        self._last[refusal.cause] = (now, 0)

    def _forget(self, now: float) -> None:
        for cause, (at, _) in list(self._last.items()):
            if now - at >= self._interval:
                del self._last[cause]
