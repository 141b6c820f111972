"""What kqp knows of the upstream cluster: its brokers, its cluster id and the API versions both sides speak.

Learned from the upstream's own answers (ApiVersions, Metadata) at start, every
`upstream.metadata_refresh_ms`, and whenever a forwarded response names a broker kqp has not seen.
The result of the last successful refresh also feeds readiness (`/readyz`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kqp.config.model import HostPort, UpstreamConfig
from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.advertised import advertised_ranges
from kqp.protocol.api_versions import ApiVersionsProbe
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.protocol.messages import metadata_brokers, metadata_cluster_id

from .cert_reload import no_tls
from .upstream_client import UpstreamClient

log = logging.getLogger("kqp.cluster")


class UpstreamCluster:
    def __init__(self, config: UpstreamConfig, max_frame_bytes: int, clock: Callable[[], float],
                 on_broker: Callable[[BrokerAddress], None] | None = None,
                 tls: Callable[[str], dict[str, Any]] = no_tls) -> None:
        self.config = config
        self._clock = clock   # the loop's (loop.time): what readiness compares the last refresh with
        self._tls = tls
        self._max_frame = max_frame_bytes
        self.brokers: dict[int, HostPort] = {}
        self.api_ranges: dict[int, tuple[int, int]] = {}
        self.cluster_id: str | None = None   # the upstream's, from its Metadata (v2+)
        self.last_refresh_ok: float | None = None     # clock time of the last good refresh
        self.last_error: str | None = None
        self._on_broker = on_broker
        self._rr = itertools.count()

    # -- addresses -----------------------------------------------------------------------------
    def upstreams_for(self, node_id: int | None) -> list[HostPort]:
        """Where a client connection on this listener goes, in the order to try: that broker; for
        bootstrap every broker, starting from the next in turn, so one that is down is passed over
        (a client has only kqp's bootstrap address, where it would have had several brokers')."""
        if node_id is not None:
            found = self.brokers.get(node_id)
            return [found] if found is not None else []
        candidates = list(self.brokers.values()) or list(self.config.bootstrap_servers)
        if not candidates:
            return []
        start = next(self._rr) % len(candidates)
        return candidates[start:] + candidates[:start]

    def learn(self, brokers: Iterable[BrokerAddress]) -> None:
        """Record brokers named by any upstream answer; new or moved ones are announced."""
        for b in brokers:
            if b.node_id < 0:
                continue
            addr = HostPort(b.host, b.port)
            if self.brokers.get(b.node_id) != addr:
                if b.node_id in self.brokers:
                    log.info("upstream broker %d moved from %s to %s", b.node_id, self.brokers[b.node_id], addr)
                else:
                    log.info("upstream broker %d is %s", b.node_id, addr)
                self.brokers[b.node_id] = addr
                if self._on_broker is not None:
                    self._on_broker(b)

    # -- refresh ---------------------------------------------------------------------------------
    def _targets(self) -> list[HostPort]:
        seen: list[HostPort] = []
        for hp in [*self.brokers.values(), *self.config.bootstrap_servers]:
            if hp not in seen:
                seen.append(hp)
        return seen

    async def refresh(self) -> None:
        """ApiVersions + Metadata from the first upstream that answers; raises if none does."""
        errors: list[str] = []
        timeout = self.config.connect_timeout_ms / 1000
        for target in self._targets():
            try:
                async with UpstreamClient(target.host, target.port, timeout, self._max_frame, tls=self._tls,
                                          sasl=self.config.sasl) as client:
                    probe = ApiVersionsProbe()
                    while probe.ranges is None:
                        probe = probe.answered(await client.request_frame(
                            ApiKey.ApiVersions, probe.version, **probe.request_fields))
                    common = _capped(advertised_ranges(probe.ranges), self.config.max_api_versions)
                    if ApiKey.Metadata not in common:
                        raise ProtocolError("upstream and kqp share no Metadata version")
                    md_version = common[ApiKey.Metadata][1]
                    frame = await client.request_frame(ApiKey.Metadata, md_version, **_metadata_fields(md_version))
                    brokers = metadata_brokers(frame, md_version)
                    cluster_id = metadata_cluster_id(frame, md_version)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError, ValueError) as exc:
                errors.append(f"{target}: {exc.__class__.__name__}: {exc}")
                continue
            self.api_ranges = common
            self.cluster_id = cluster_id
            self.learn(brokers)
            self.last_refresh_ok = self._clock()
            self.last_error = None
            return
        self.last_error = "; ".join(errors) or "no upstream address configured"
        raise ConnectionError(f"no upstream broker answered ({self.last_error})")

    async def refresh_forever(self, stop: asyncio.Event) -> None:
        interval = self.config.metadata_refresh_ms / 1000
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                await self.refresh()
            except ConnectionError as exc:
                log.warning("upstream metadata refresh failed: %s", exc)


def _capped(ranges: dict[int, tuple[int, int]], caps: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """The operator's `upstream.max_api_versions` applied; an API capped below its minimum is dropped."""
    out = dict(ranges)
    for key, cap in caps.items():
        if key in out:
            low, high = out[key]
            if cap < low:
                del out[key]
            else:
                out[key] = (low, min(high, cap))
    return out


def _metadata_fields(version: int) -> dict[str, object]:
    """A Metadata request for brokers only: an empty topic list (null would mean all topics)."""
    fields: dict[str, object] = {"topics": []}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    return fields
