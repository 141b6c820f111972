"""Everything a session shares with the rest of the process, in one object passed to constructors.

Injected rather than global so tests can build a context with their own loop, clock and quota
settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kqp.config.model import ProxyConfig
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.quotas.manager import QuotaManager

from .cluster import UpstreamCluster
from .delay import DelayDriver

if TYPE_CHECKING:
    from kqp.proxy.connection.mutation_gate import MutationGate
    from kqp.proxy.connection.session import ClientSession

    from .listeners import ListenerSet


@dataclass
class ProxyContext:
    loop: asyncio.AbstractEventLoop
    config: ProxyConfig
    quotas: QuotaManager
    delay: DelayDriver
    cluster: UpstreamCluster
    listeners: ListenerSet
    observer: ProxyObserver = field(default_factory=ProxyObserver)
    sessions: set[ClientSession] = field(default_factory=set)
    mutation_gate: MutationGate | None = None   # KIP-599; one per process so sessions share its topic cache
    # Set by the server while it drains on SIGTERM; sessions signal it when they close or deliver.
    drain_progress: asyncio.Event | None = None
    clock: Callable[[], float] | None = None   # defaults to loop.time; quota math and the delay queue share it

    def progress(self) -> None:
        """A session closed or delivered a response: wake a draining shutdown to look again."""
        if self.drain_progress is not None:
            self.drain_progress.set()

    def now(self) -> float:
        return self.clock() if self.clock is not None else self.loop.time()
