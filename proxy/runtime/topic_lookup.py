"""The topic lookup a mutation request may wait for: an all-topics Metadata request to the upstream.

DeleteTopics and CreatePartitions cost the partitions a topic has now (KIP-599); when the topic
cache (`kqp.proxy.policies.topic_metadata`) does not know a topic, the connection core asks for
a lookup and waits. The lookup asks for *every* topic: a request naming a topic may make an
upstream auto-create it (Tansu does), which would turn a DeleteTopics of a missing topic into a
create. Lookups run one at a time; a connection needing one while another runs awaits the same one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kqp.config.model import HostPort, UpstreamSasl
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.proxy.policies.topic_metadata import TopicMetadata

from .cert_reload import no_tls
from .upstream_client import UpstreamClient

log = logging.getLogger("kqp.mutations")


class TopicLookup:
    def __init__(self, topics: TopicMetadata, upstream: Callable[[], Sequence[HostPort]],
                 api_ranges: Callable[[], Mapping[int, tuple[int, int]]], step_seconds: float,
                 max_frame_bytes: int, tls: Callable[[str], dict[str, Any]] = no_tls,
                 sasl: UpstreamSasl | None = None) -> None:
        self._topics = topics
        self._tls = tls
        self._sasl = sasl
        self._upstream = upstream
        self._api_ranges = api_ranges
        self._step = step_seconds
        self._max_frame = max_frame_bytes
        self._running: asyncio.Task[None] | None = None

    async def __call__(self) -> None:
        """Refresh the cache; concurrent callers share one request. Never raises but for
        cancellation: a failed lookup is logged, and the callers go on with what the cache knows."""
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._fetch())
        # shield: one waiting connection closing must not cancel the lookup others await.
        await asyncio.shield(self._running)

    async def _fetch(self) -> None:
        targets = self._upstream()   # the brokers in turn: one that is down is passed over
        versions = self._api_ranges().get(ApiKey.Metadata)
        if not targets or versions is None:
            return
        version = versions[1]
        fields: dict[str, Any] = {"topics": None if version >= 1 else []}  # v0: empty list = all
        if version >= 4:
            fields["allow_auto_topic_creation"] = False
        failures: list[str] = []
        for target in targets:
            try:
                async with UpstreamClient(target.host, target.port, self._step, self._max_frame, tls=self._tls,
                                          sasl=self._sasl) as client:
                    response = await client.request(ApiKey.Metadata, version, **fields)
                break
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError) as exc:
                failures.append(f"at {target} failed: {type(exc).__name__}: {exc}")
            except Exception:
                # A bug, not the upstream's fault: said loudly, but the connections waiting on this
                # lookup must still go on (with what the cache knows), so it is not re-raised.
                log.exception("topic metadata lookup at %s failed unexpectedly", target)
                return
        else:
            log.warning("topic metadata lookup %s; partition counts not known to kqp count as 0",
                        "; ".join(failures))
            return
        self._topics.learn_topics(response.topics or (), complete=True)
