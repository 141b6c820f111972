"""Legal values a user may not expect: what `kqp check-config` warns about, exit status still 0.

The loader refuses what kqp cannot run with; some values it must accept still do something a user
would want to hear of before deploying: a quota of 0 blocks its client (Kafka refuses 0), a request
quota below one request a window cannot hold (its throttles are capped at one window), an observed
quota throttles nobody. Each warning is one line naming the key as a config error would, so an
operator finds it in the file the same way. Pure: a function of the loaded `ProxyConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kqp.config.model import ProxyConfig
from kqp.quotas.model import ENFORCE, OBSERVE, EntitySpec, QuotaSettings, QuotaType

__all__ = ["Surprise", "surprises"]

LONG_BURST_SECONDS = 60.0     # Kafka's defaults let 10 s of quota through at once
SYNC_SHARE_OF_SPAN = 0.1      # the fleet's bound: keep sync_interval_ms under a tenth of the span
WILDCARDS = ("0.0.0.0", "::")


@dataclass(frozen=True)
class Surprise:
    """One warning: the dotted key it is about, and what the value will do."""

    key: str
    message: str

    def line(self, source: str | None) -> str:
        where = f"config warning in {source}" if source else "config warning"
        return f"{where}: {self.key}: {self.message}"


def surprises(config: ProxyConfig) -> list[Surprise]:
    """Every surprising value of `config`, in the order the file's sections come."""
    found: list[Surprise] = []
    if config.fetch_throttle == "empty":
        found.append(Surprise("fetch_throttle", "empty: an over-quota Fetch is answered without the records "
                                                "kqp already read from the upstream, which are read again after "
                                                "the throttle"))
    found += _windows(config)
    found += _quota_values(config.quotas, _entry_paths(config.document))
    found += _modes(config.quotas, _entry_paths(config.document))
    listen = config.metrics.listen
    if listen is not None and listen.host in WILDCARDS:
        found.append(Surprise("metrics.listen", f"{listen}: anyone who can connect sees every entity's quotas, usage "
                                                "and connections; bind 127.0.0.1 or admit only Prometheus"))
    if config.limits.max_in_flight_per_connection == 1:
        found.append(Surprise("limits.max_in_flight_per_connection",
                              "1: a connection's next request is read only once the last is answered, so a client "
                              "that pipelines (a producer's max.in.flight) waits a round trip per request"))
    return found


def _windows(config: ProxyConfig) -> Iterator[Surprise]:
    q = config.quotas
    burst = (q.window_count - 1) * q.window_size_seconds
    if burst > LONG_BURST_SECONDS:
        yield Surprise("quotas", f"{q.window_count} windows of {q.window_size_seconds:g} s let a new or idle client "
                                 f"send {burst:g} s of its quota at once before its first throttle")
    span = q.window_count * q.window_size_seconds
    interval = config.fleet.cluster.sync_interval_ms / 1000
    if config.fleet.scope == "cluster" and interval > SYNC_SHARE_OF_SPAN * span:
        yield Surprise("quotas.cluster.sync_interval_ms",
                       f"{interval * 1000:g} ms is over a tenth of the quota span ({span:g} s): the fleet may run "
                       f"up to about {interval / span:.0%} over its quotas")


def _quota_values(q: QuotaSettings, paths: Mapping[EntitySpec, str]) -> Iterator[Surprise]:
    window = q.window_size_seconds
    for entity, values in q.entities.items():
        where = paths.get(entity, f"quotas.entities ({entity.path})")
        for quota_type, value in values.items():
            key = f"{where}.{quota_type}"
            if quota_type == QuotaType.REQUEST_RATE and value < 1 / window:
                what = f"0 does not block {entity.path}" if value == 0 else \
                    f"{value:g}/s cannot hold for {entity.path}"
                yield Surprise(key, f"{what}: request throttles are capped at one window ({window:g} s), so each "
                                    f"of its connections still sends a request a window ({1 / window:g}/s)")
            elif value == 0:
                yield Surprise(key, f"0 blocks {entity.path}: any use throttles it for the whole span "
                                    f"({q.window_count * window:g} s); Kafka refuses 0")


def _modes(q: QuotaSettings, paths: Mapping[EntitySpec, str]) -> Iterator[Surprise]:
    if q.mode == OBSERVE:
        enforced = sum(m == ENFORCE for m in q.modes.values()) + sum(p.mode == ENFORCE for p in q.pools)
        but = f" but by the entries and pools that say mode: enforce ({enforced})" if enforced else ""
        yield Surprise("quotas.mode", f"observe: quotas are measured and what they would throttle is counted; "
                                      f"nobody is throttled{but}")
        return
    for entity, mode in q.modes.items():
        if mode == OBSERVE:
            where = paths.get(entity, f"quotas.entities ({entity.path})")
            yield Surprise(f"{where}.mode", f"observe: the quotas of {entity.path} are counted, not enforced")
    for index, pool in enumerate(q.pools):
        if pool.mode == OBSERVE:
            yield Surprise(f"quotas.pools[{index}].mode", f"observe: pool {pool.name} divides its budget and counts "
                                                          "what it would throttle, and throttles nobody")


def _entry_paths(document: Mapping[str, object]) -> dict[EntitySpec, str]:
    """Each entity's entry as the file numbers it (`quotas.entities[2]`), read from the loaded
    document, whose names the loader has checked to be strings."""
    quotas = document.get("quotas")
    entries = quotas.get("entities") if isinstance(quotas, Mapping) else None
    paths: dict[EntitySpec, str] = {}
    for index, entry in enumerate(entries or ()):
        if isinstance(entry, Mapping):
            ids = [entry.get(k) for k in ("user", "client_id", "client_id_prefix")]
            paths[EntitySpec(*ids)] = f"quotas.entities[{index}]"
    return paths
