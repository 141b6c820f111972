"""The fleet exchange's driver: one asyncio task per process, off the request path.

Every `sync_interval_ms` the task asks the `FleetLedger` what to send (`collect`), hands it to the
backend (Redis, a Redis Cluster, or the `--workers` parent), and gives the answer back (`merge`) or
reports the failure (`failed`). Requests never wait for any of it: they only touch the ledger's
dicts on the event loop, and this task's awaits give the loop back while the exchange is on the
wire. Each exchange has a deadline `timeout_ms` ahead, which the backend keeps (a Redis Cluster's
backend needs it to tell which of its shards answered in time); one that fails or times out puts
the ledger "alone" (each quota at its share) at once, and the next successful one brings the fleet
back. The state change is logged once each way, and shown in metrics (`FleetStatus`) and in
/readyz's detail; a process sharing nothing is still ready, because it still serves. Adaptive pools'
windows ride along (`exchange`'s adaptive request: one round trip on one Redis, one message to the
`--workers` parent), so that the fleet runs one law per pool budget; when that part fails they go alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterable
from typing import Protocol

from kqp.config.errors import ConfigError
from kqp.config.fleet_section import redis_target
from kqp.config.model import ClusterConfig, FleetConfig
from kqp.proxy.observability.fleet_metrics import FleetStatus
from kqp.quotas.fleet.ledger import ExchangeIncomplete, FleetLedger, SyncReply, SyncRequest
from kqp.quotas.model import QuotaSettings
from kqp.quotas.pools.adaptive import AdaptivePool, fleet_failed, fleet_merge, fleet_request
from kqp.quotas.pools.adaptive_fleet import AdaptiveReply, AdaptiveRequest

log = logging.getLogger("kqp.fleet")


class FleetBackend(Protocol):
    kind: str    # "redis" or "workers"
    name: str    # shown in logs, metrics and /readyz

    async def exchange(self, request: SyncRequest, deadline: float,
                       adaptive: AdaptiveRequest | None = None
                       ) -> tuple[SyncReply, AdaptiveReply | BaseException | None]:
        """The store's answer to `request` by `deadline` (the event loop's clock), or an exception
        (TimeoutError; `ExchangeIncomplete` when part of the store applied its part of the request).
        With `adaptive`, the adaptive pools' exchange goes in the same round trip where the store
        allows, and its answer comes second: a reply, or its failure, returned, not raised (None
        without `adaptive`)."""
        ...

    async def close(self) -> None: ...


class FleetSync:
    def __init__(self, ledger: FleetLedger, backend: FleetBackend, interval: float, timeout: float,
                 clock: Callable[[], float]) -> None:
        self.ledger = ledger
        self.backend = backend
        #: The process's adaptive pools (set where the server is assembled): each exchange carries
        #: their windows, so that the fleet runs one law per pool budget (quotas/pools/adaptive.py).
        self.adaptive_pools: Callable[[], Iterable[AdaptivePool]] = tuple
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self.syncs = 0
        self.errors = 0
        self.sensors = 0
        self.last_error: str | None = None
        self.last_duration: float | None = None
        self._down_since: float | None = None
        self._announced = False   # the first outcome has been logged

    async def sync_once(self) -> bool:
        """One exchange; True if it succeeded."""
        ledger = self.ledger
        request = ledger.collect(self._clock())
        pools = list(self.adaptive_pools())
        adaptive = fleet_request(pools, ledger, self._clock())
        self.sensors = len(request.sensors)
        self.syncs += 1
        sent = self._clock()
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            reply, answer = await self.backend.exchange(request, deadline, adaptive)
        except asyncio.CancelledError:
            ledger.failed(request)
            fleet_failed(pools)
            raise
        except ExchangeIncomplete as exc:   # what the answering shards took is not sent again
            ledger.failed(request, exc.sensors)
            fleet_failed(pools)
            self._went_down(exc)
            return False
        except Exception as exc:   # any failure of the store is the same to quotas: go alone
            ledger.failed(request)
            fleet_failed(pools)
            self._went_down(exc)
            return False
        received = self._clock()
        ledger.merge(request, reply, sent, received)
        if isinstance(answer, BaseException):   # the adaptive pools alone go alone: each runs its law here
            log.debug("fleet: the adaptive pools' exchange failed: %r", answer)
            fleet_failed(pools)
        elif answer is not None and adaptive is not None:
            fleet_merge(pools, adaptive, answer, ledger.instances, received)
        self.last_duration = received - sent
        self._came_up(received)
        return True

    def _went_down(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = f"timed out after {self.timeout * 1000:.0f} ms" if isinstance(exc, TimeoutError) \
            else str(exc) if isinstance(exc, ExchangeIncomplete) else f"{type(exc).__name__}: {exc}"
        if self._down_since is None:
            self._down_since = self._clock()
            log.warning("fleet quotas: the usage exchange with %s failed (%s); each quota is held at this "
                        "process's share, 1/%d, until it answers again", self.backend.name, self.last_error,
                        self.ledger.divisor)
        self._announced = True

    def _came_up(self, now: float) -> None:
        if self._down_since is not None:
            log.info("fleet quotas: %s answers again after %.1fs; quotas are shared by %d instance(s)",
                        self.backend.name, now - self._down_since, self.ledger.instances)
            self._down_since = None
        elif not self._announced:
            log.info("fleet quotas: shared through %s with %d instance(s), exchanging every %.0f ms",
                     self.backend.name, self.ledger.instances, self.interval * 1000)
        self._announced = True

    async def run(self, stop: asyncio.Event) -> None:
        """Exchange at most once per interval until `stop` is set or the task is cancelled (the
        server cancels it at shutdown); then close the backend."""
        try:
            while not stop.is_set():
                started = self._clock()
                await self.sync_once()
                left = self.interval - (self._clock() - started)
                if left > 0:   # the pause until the next exchange ends early when `stop` is set
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await stop.wait()
        finally:
            with contextlib.suppress(Exception):
                await self.backend.close()

    # -- what metrics and /readyz read -------------------------------------------------------------
    def status(self) -> FleetStatus:
        ledger = self.ledger
        last = ledger.last_success
        return FleetStatus(self.backend.kind, self.backend.name, ledger.shared, ledger.instances, ledger.scale,
                           self.syncs, self.errors, self.last_duration,
                           None if last is None else self._clock() - last, self.sensors, self.last_error)

    def describe(self) -> str:
        ledger = self.ledger
        if ledger.shared:
            return f"quotas shared by {ledger.instances} instance(s) through {self.backend.name}"
        if self._down_since is None and ledger.last_success is not None:
            # No exchange failed: the last success is older than the ledger trusts (its loop is starved).
            return (f"quotas not shared: the last exchange with {self.backend.name} is "
                    f"{self._clock() - ledger.last_success:.1f}s old; holding each quota at 1/{ledger.divisor}")
        since = "" if self._down_since is None else f" for {self._clock() - self._down_since:.0f}s"
        error = f" ({self.last_error})" if self.last_error else ""
        return (f"quotas not shared: {self.backend.name} unreachable{since}{error}; "
                f"holding each quota at 1/{ledger.divisor}")


def cluster_password(cluster: ClusterConfig) -> str | None:
    """The Redis password from `password_env`, if set; a variable that is not set is a config error."""
    if cluster.password_env is None:
        return None
    value = os.environ.get(cluster.password_env)
    if value is None:
        raise ConfigError("quotas.cluster.password_env", f"the environment variable {cluster.password_env} "
                                                         "is not set")
    return value


def open_fleet(fleet: FleetConfig, quotas: QuotaSettings, workers: int, workers_path: str | None,
               clock: Callable[[], float], wall: Callable[[], float]) -> FleetSync | None:
    """The exchange this process takes part in, or None when its quotas are its own.

    Cluster scope: Redis, each worker an instance of the fleet. Instance scope under `--workers`:
    the parent process, the workers the fleet. Otherwise nothing is shared (Kafka's semantics).
    """
    cluster = fleet.cluster
    backend: FleetBackend
    if fleet.scope == "cluster":
        # redis-py is imported only by processes that use it
        from kqp.proxy.runtime.fleet.redis_cluster import RedisClusterExchange
        from kqp.proxy.runtime.fleet.redis_store import RedisExchange

        assert cluster.redis_url is not None
        target = redis_target(cluster.redis_url)
        kind = RedisClusterExchange if target.cluster_nodes else RedisExchange
        backend = kind(target, cluster_password(cluster), cluster.key_prefix, cluster.timeout_ms / 1000)
        expected = cluster.expected_instances
    elif workers > 1 and workers_path is not None:
        from kqp.proxy.runtime.fleet.local import WorkersExchange

        backend = WorkersExchange(workers_path)
        expected = workers
    else:
        return None
    interval = cluster.sync_interval_ms / 1000
    instance = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"
    now = clock()
    # The store's clock is a wall clock (Redis TIME, the parent's time.time()): start from ours, and
    # let every exchange correct the difference.
    ledger = FleetLedger(instance, secrets.token_hex(8), quotas.window_size_seconds, quotas.window_count,
                         expected, interval, clock_offset=wall() - now, timeout=cluster.timeout_ms / 1000)
    return FleetSync(ledger, backend, interval, cluster.timeout_ms / 1000, clock)
