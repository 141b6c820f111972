"""The store side of the fleet exchange, in memory: what `kqp run --workers N` runs without Redis.

The parent process of `--workers` answers its workers' `SyncRequest`s with one `FleetStore`
(proxy/runtime/fleet/local.py carries them over a Unix socket). It is also the specification of the
Redis backends: proxy/runtime/fleet/redis_store.py's Lua script does exactly this, step for step, and a
test compares their answers. Per exchange, for the calling instance: note it present at `now` and
forget instances silent for `live_ms`; per sensor, add the deltas to its per-window totals, drop
windows older than `keep_windows`, keep the sensor `ttl_ms` more if it received anything, note the
instance as adding to it, and return its totals with the number of other instances that added
within `active_ms`; answer with the store's epoch, its clock and the instances present. Sensors
nobody touched for their ttl are deleted, as Redis expires their keys.
"""

from __future__ import annotations

import math

from kqp.quotas.fleet.ledger import SensorTotals, SyncReply, SyncRequest


class FleetStore:
    """Per-window usage totals per sensor, and the instances present: one fleet's shared state."""

    def __init__(self) -> None:
        self.epoch: str | None = None
        self._windows: dict[tuple[int, str], dict[int, float]] = {}
        self._expires: dict[tuple[int, str], float] = {}
        self._adders: dict[tuple[int, str], dict[str, float]] = {}   # sensor -> instance -> last added
        self._instances: dict[str, float] = {}

    def exchange(self, request: SyncRequest, now: float) -> SyncReply:
        """Apply one process's usage and return the fleet's totals; `now` is the store's clock (s)."""
        if self.epoch is None:
            self.epoch = request.epoch
        self._instances[request.instance] = now
        live = request.live_ms / 1000
        for instance in [i for i, seen in self._instances.items() if now - seen > live]:
            del self._instances[instance]
        for key in [k for k, until in self._expires.items() if until <= now]:
            del self._expires[key]
            self._windows.pop(key, None)
            self._adders.pop(key, None)
        first = math.floor(now * 1000 / request.window_ms) - request.keep_windows
        active = request.active_ms / 1000
        totals: list[SensorTotals] = []
        for sensor in request.sensors:
            key = (request.window_ms, sensor.name)
            windows = self._windows.get(key)
            if sensor.deltas:
                windows = self._windows.setdefault(key, {})
                for window, delta in sensor.deltas:
                    windows[window] = windows.get(window, 0.0) + delta
                self._expires[key] = now + request.ttl_ms / 1000
                self._adders.setdefault(key, {})[request.instance] = now
            if windows is None:
                totals.append(SensorTotals({}, 0))   # read only, and nobody has written it: a missing Redis key
                continue
            for window in [w for w in windows if w < first]:
                del windows[window]
            adders = self._adders.get(key, {})
            for instance in [i for i, at in adders.items() if now - at > active]:
                del adders[instance]
            others = sum(1 for instance in adders if instance != request.instance)
            totals.append(SensorTotals(dict(windows), others))
        return SyncReply(self.epoch, now, len(self._instances), tuple(totals))

    @property
    def sensor_count(self) -> int:
        return len(self._windows)
