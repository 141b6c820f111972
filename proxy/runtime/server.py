"""The proxy process: upstream discovery, listeners, the delay queue, signals and shutdown.

Start-up order matters for clients: kqp learns the upstream's brokers and API versions first, binds
one listener per broker, and only then opens the bootstrap listener, so the first Metadata a client
gets through kqp can already be answered with kqp's own ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal

from kqp.config.model import ProxyConfig
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.session import ClientSession
from kqp.proxy.observability.http_endpoint import MetricsService, start_metrics
from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import QuotaSettings

from .cluster import UpstreamCluster
from .context import ProxyContext
from .delay import DelayDriver
from .listeners import ListenerSet
from .reload import ConfigReloader

log = logging.getLogger("kqp")

START_RETRY_MAX_SECONDS = 5.0


class ProxyServer:
    def __init__(self, config: ProxyConfig, observer: ProxyObserver | None = None,
                 overrides: dict[str, str | None] | None = None, reuse_port: bool = False) -> None:
        self.config = config
        self.reuse_port = reuse_port
        self.overrides = overrides or {}
        self.observer = observer or PrometheusObserver.for_proxy(config.metrics)
        self.metrics: MetricsService | None = None
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.ctx: ProxyContext | None = None

    def _build(self, loop: asyncio.AbstractEventLoop) -> ProxyContext:
        cfg = self.config
        holder: list[ProxyContext] = []

        def factory(name: str, node_id: int | None) -> asyncio.Protocol:
            return ClientSession(holder[0], name, node_id)

        listeners = ListenerSet(loop, cfg.listen, cfg.advertised_host, cfg.broker_port, factory,
                                reuse_port=self.reuse_port)
        cluster = UpstreamCluster(cfg.upstream, cfg.max_frame_bytes,
                                  on_broker=lambda b: listeners.ensure_broker(b.node_id))
        ctx = ProxyContext(
            loop=loop, config=cfg, quotas=QuotaManager(cfg.quotas, loop.time()), delay=DelayDriver(loop),
            cluster=cluster, listeners=listeners, observer=self.observer,
        )
        holder.append(ctx)
        return ctx

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.ctx = ctx = self._build(loop)
        self.metrics = await start_metrics(self)   # first, so /healthz answers while kqp waits for the upstream
        delay = 0.2
        while True:
            try:
                await ctx.cluster.refresh()
                break
            except ConnectionError as exc:
                log.warning("waiting for the upstream: %s (retrying in %.1fs)", exc, delay)
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
                return
            except TimeoutError:
                delay = min(delay * 2, START_RETRY_MAX_SECONDS)
        await ctx.listeners.settle()
        port = await ctx.listeners.start_bootstrap()
        self._tasks.append(loop.create_task(ctx.cluster.refresh_forever(self.stopping)))
        self._tasks.append(loop.create_task(self._reap_idle()))
        if self.config.source:
            reloader = ConfigReloader(self.config.source, self.config, self.update_quotas,
                                      on_result=self.observer.config_reload, apply_runtime=self._apply_runtime,
                                      overrides=self.overrides)
            self._tasks.append(loop.create_task(reloader.watch(self.stopping)))
        self.ready.set()
        log.info("kqp ready listen=%s:%d upstream brokers=%s", self.config.listen.host, port,
                 ",".join(f"{n}={hp}" for n, hp in sorted(ctx.cluster.brokers.items())))

    async def _reap_idle(self) -> None:
        """Kafka's connections.max.idle.ms, enforced whether or not the connection is muted."""
        assert self.ctx is not None
        while not self.stopping.is_set():
            # Read on every pass, at least once a second: a reload may change connections_max_idle_ms.
            idle = self.config.connections_max_idle_ms / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), min(max(idle / 10, 0.05), 1.0))
            now = self.ctx.now()
            # Kafka drops a quota sensor after an hour unused; so does kqp, metrics endpoint or not.
            self.ctx.quotas.expire(now, self.config.metrics.entity_expiry_seconds)
            for session in list(self.ctx.sessions):
                if now - session.last_activity > idle:
                    session.close("idle", f"idle for more than {self.config.connections_max_idle_ms} ms")

    def _apply_runtime(self, config: ProxyConfig) -> None:
        """Settings that can change live besides quotas (fetch_throttle, idle timeout)."""
        assert self.ctx is not None
        self.ctx.config = self.config = dataclasses.replace(
            self.config, fetch_throttle=config.fetch_throttle, connections_max_idle_ms=config.connections_max_idle_ms,
            quotas=config.quotas)

    def update_quotas(self, settings: QuotaSettings) -> list[str]:
        assert self.ctx is not None
        return self.ctx.quotas.update_settings(settings, self.ctx.now())

    async def shutdown(self) -> None:
        """Stop accepting, let owed responses drain for `shutdown_grace_ms`, then close everything."""
        self.stopping.set()
        ctx = self.ctx
        if ctx is None:
            return
        await ctx.listeners.close()
        for session in list(ctx.sessions):
            session.begin_shutdown()
        deadline = ctx.loop.time() + self.config.shutdown_grace_ms / 1000
        progress = ctx.drain_progress = asyncio.Event()
        while any(not s.drained for s in ctx.sessions) and (left := deadline - ctx.loop.time()) > 0:
            progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), left)
        for session in list(ctx.sessions):
            session.close("shutdown", None)
        ctx.delay.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.metrics is not None:
            await self.metrics.close()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            await self.start()
            await self.stopping.wait()
            log.info("kqp stopping: draining in-flight responses")
        finally:
            await self.shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("kqp stopped")
        return 0
