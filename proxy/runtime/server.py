"""The proxy process: where its parts are built and wired, and its life (start, reload, drain, stop).

`ProxyServer._assemble` is the one place that builds the quota manager (and the fleet exchange),
the process-wide policies (`kqp.proxy.policies`), the handler registry (`standard_handlers`) and its
charging, the observer's bindings, the delay driver, the listeners and the upstream cluster, and
hands each part only what it uses: the core gets `CoreWiring`, each edge `EdgeWiring`, the HTTP
endpoint a registry and `readiness`. Running code reads the loop's clock, handed to it here.

A connection decides its own end: the idle reaper only sends each an `IdleCheck`, and on shutdown
each drains and closes itself; the server waits for its open set to empty or `shutdown_grace_ms`.
Start-up learns the upstream's brokers and versions first and binds one listener per broker before
the bootstrap listener, so a client's first Metadata already gets kqp's own ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import signal
import time
from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry

from kqp.config.model import ProxyConfig, UpstreamSasl
from kqp.protocol.addresses import BrokerAddress
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.charging import Charging
from kqp.proxy.connection.handlers.registry import served_apis, standard_handlers
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.oauthbearer import TokenValidator
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.proxy.connection.views import ConnectionView, connection_view
from kqp.proxy.connection.wiring import CoreSettings, CoreWiring
from kqp.proxy.observability import quota_audit
from kqp.proxy.observability.acl_audit import AclAudit
from kqp.proxy.observability.authorization_log import AuthorizationLog
from kqp.proxy.observability.explain import Explainer
from kqp.proxy.observability.fleet_metrics import FleetCollector
from kqp.proxy.observability.http_endpoint import MetricsEndpoint
from kqp.proxy.observability.metrics import PrometheusObserver, UpstreamHealth, prepare_scrape
from kqp.proxy.observability.pool_metrics import budget_changes
from kqp.proxy.observability.quota_audit import QuotaAudit
from kqp.proxy.policies.authorization.acl_admin import AclAdmin
from kqp.proxy.policies.authorization.checks import AclState, RequestAuthorization
from kqp.proxy.policies.authorization.rules import RULES
from kqp.proxy.policies.mutation_gate import MutationGate
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.proxy.runtime.fleet.sync import FleetSync, open_fleet
from kqp.proxy.runtime.state.acl_store import AclStore
from kqp.proxy.runtime.state.quota_store import QuotaStore
from kqp.proxy.tls.contexts import client_context, server_context, watched_files
from kqp.proxy.tls.peers import PeerIdentity
from kqp.quotas.acls.authorizer import Authorizer
from kqp.quotas.connection_limits import ConnectionLimits
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import QuotaSettings

from .admission import Admission, limit_settings
from .cert_reload import ReloadingContext, UpstreamTls, no_tls
from .cluster import UpstreamCluster
from .delay import DelayDriver
from .edge import ClientEdge, EdgeWiring
from .jwks import Jwks
from .listeners import BindError, ListenerSet, ListenerTls
from .proxy_protocol import HeaderReader
from .refusals import RefusalLog
from .reload import ConfigReloader
from .topic_lookup import TopicLookup
from .workers import WorkerSeat

log = logging.getLogger("kqp")

START_RETRY_MAX_SECONDS = 5.0


def forwarding_login(config: ProxyConfig) -> UpstreamSasl | None:
    """kqp's own login on the connections it forwards clients over: none in passthrough, where the
    client's own SASL frames go upstream on that connection (kqp's control connections still log in)."""
    return None if config.sasl.mode == "passthrough" else config.upstream.sasl


def core_settings(config: ProxyConfig) -> CoreSettings:
    return CoreSettings(max_frame_bytes=config.max_frame_bytes, fetch_throttle=config.fetch_throttle,
                        max_in_flight=config.limits.max_in_flight_per_connection,
                        connections_max_idle_ms=config.connections_max_idle_ms,
                        connect_timeout_ms=config.upstream.connect_timeout_ms, pacing=config.quotas.pacing)


class ProxyServer:
    def __init__(self, config: ProxyConfig, observer: ProxyObserver | None = None,
                 overrides: dict[str, str | None] | None = None, reuse_port: bool = False,
                 seat: WorkerSeat | None = None) -> None:
        self.config = config
        self.reuse_port = reuse_port
        self.seat = seat   # this worker's place under `kqp run --workers N`, if any
        self.fleet: FleetSync | None = None
        self.overrides = overrides or {}
        self.observer = observer or PrometheusObserver.for_proxy(config.metrics)
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.connections: set[ClientEdge] = set()
        self.endpoint: MetricsEndpoint | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._progress: asyncio.Event | None = None   # set while draining: a connection closed
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tls_contexts: list[ReloadingContext] = []   # polled for rotated certificates
        self.audit = QuotaAudit()   # every change of the quotas in force: logged per entity, counted
        self.store = self._quota_store()   # first: a state file that does not load stops kqp before anything runs
        self.acl_audit = AclAudit()   # and of the ACLs in force
        self.acls = AclState(Authorizer())   # the authorizer in force, swapped by the ACL store
        self.acl_store = self._acl_store()
        self.authorization_log: AuthorizationLog | None = None
        self.jwks: Jwks | None = None   # sasl.oauthbearer: the keys tokens are checked with

    # -- assembly --------------------------------------------------------------------------------
    def _assemble(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.config
        self.loop = loop
        workers, parent = (self.seat.workers, self.seat.exchange_path) if self.seat else (1, None)
        self.fleet = open_fleet(cfg.fleet, cfg.quotas, workers, parent, loop.time, time.time)
        # The state file's changes over the config file's quotas, in force from the first request.
        self.quotas = QuotaManager(self.store.effective if self.store else cfg.quotas, loop.time(),
                                   self.fleet.ledger if self.fleet else None)
        if self.fleet is not None:   # adaptive pools run one law for the fleet, through the same exchange
            self.fleet.adaptive_pools = lambda: self.quotas.pools.adaptive.values()
        topics = TopicMetadata()
        self.delay = DelayDriver(loop)
        refused = RefusalLog(self.observer, loop.time)
        self.admission = Admission(loop, ConnectionLimits(limit_settings(cfg)),
                                   RefusalLog(self.observer, loop.time, logger=logging.getLogger("kqp.limits")))
        listener_tls, identify = self._listener_tls(refused)
        upstream_tls = self._upstream_tls()
        self.listeners = ListenerSet(loop, cfg.listen, cfg.advertised_host, cfg.broker_port,
                                     lambda name, node_id, slot, peer: ClientEdge(wiring, name, node_id, slot, peer),
                                     reuse_port=self.reuse_port, tls=listener_tls, header=self._header_reader(loop),
                                     broker_key=cfg.broker_port_key)
        self.cluster = cluster = UpstreamCluster(cfg.upstream, cfg.max_frame_bytes, loop.time,
                                                 on_broker=lambda b: self.listeners.listen_for((b.node_id,)),
                                                 tls=upstream_tls)
        charging = Charging(self.quotas, self.observer)
        sasl = SaslPolicy.from_config(cfg.sasl, tokens=self._tokens(loop))
        readers = cfg.admin.describe_principals
        admin = (None if self.store is None
                 else QuotaAdmin(frozenset(cfg.admin.principals), lambda: self.quotas.settings,
                                 None if readers is None else frozenset(readers)))
        gate = MutationGate(self.quotas, topics)
        authorization, acl_admin = self._authorization(loop, topics, admin)
        gate.learn_topics = authorization is not None   # topic ids to names, for Produce and Fetch by id
        self.core = CoreWiring(
            charging=charging,
            handlers=standard_handlers(charging, gate, sasl, lambda: cluster.api_ranges, admin, authorization,
                                       acl_admin, lambda: cluster.cluster_id),
            listener_for=self.listeners.lookup(cluster.brokers), perf=time.perf_counter, cpu=time.thread_time,
            settings=core_settings(cfg), sasl=sasl, upstream_sasl=forwarding_login(cfg),
        )
        lookup = TopicLookup(topics, lambda: cluster.upstreams_for(None), lambda: cluster.api_ranges,
                             cfg.upstream.connect_timeout_ms / 1000, cfg.max_frame_bytes, tls=upstream_tls,
                             sasl=cfg.upstream.sasl)
        wiring = EdgeWiring(loop=loop, core=self.core, delay=self.delay, upstream_for=cluster.upstreams_for,
                            look_up_topics=lookup, ensure_listeners=self._ensure_listeners,
                            open_connections=self.connections, on_closed=self._on_closed,
                            identify=identify, refused=refused, upstream_tls=upstream_tls, admission=self.admission,
                            commit_quotas=None if self.store is None else partial(self.store.commit, loop=loop),
                            commit_acls=None if self.acl_store is None else partial(self.acl_store.commit, loop=loop))

    def _authorization(self, loop: asyncio.AbstractEventLoop, topics: TopicMetadata,
                       admin: QuotaAdmin | None) -> tuple[RequestAuthorization | None, AclAdmin | None]:
        """`authorization.enabled`: every request authorized with the ACLs in force, the ACL API kqp's."""
        cfg = self.config
        if not cfg.authorization.enabled:
            if cfg.sasl.mode == "terminate":
                log.warning("authorization is off with sasl mode terminate: every client acts upstream as kqp's "
                            "own user (upstream.sasl), whatever its name")
            return None, None
        self.authorization_log = denials = AuthorizationLog(loop.time, cfg.metrics.max_entities)
        acl_admin = AclAdmin(self.acls, frozenset(cfg.admin.principals), frozenset(cfg.admin.describe_principals or ()),
                             writable=cfg.authorization.state_file is not None)
        authorization = RequestAuthorization(self.acls, RULES, topics, denials.denied, served_apis(admin, acl_admin))
        kept = cfg.authorization.state_file
        log.info("kqp authorizes every request: %d ACL(s) in force, super users %s%s",
                 len(self.acls.authorizer.bindings), ", ".join(cfg.authorization.super_users) or "none",
                 "" if kept is None else f", ACL changes kept in {kept}")
        return authorization, acl_admin

    def _ensure_listeners(self, brokers: tuple[BrokerAddress, ...]) -> str | None:
        """The core's `EnsureListeners`: the brokers' upstream addresses recorded (new ones bound
        through the cluster's `on_broker`), then any still without a listener tried again; what failed."""
        self.cluster.learn(brokers)
        return self.listeners.listen_for(b.node_id for b in brokers)

    def _quota_store(self) -> QuotaStore | None:
        """`admin.manage_quotas`: the state file's changes over the config file's quotas, from the start."""
        admin = self.config.admin
        if not admin.manage_quotas or admin.state_file is None:
            return None
        store = QuotaStore(admin.state_file, self.config.quotas, self.update_settings, self.audit)
        log.info("kqp answers the quota admin API (alter: %s); state file %s holds %d entities",
                 ", ".join(admin.principals), admin.state_file, len(store.layer))
        self.audit.record(self.config.quotas, store.effective, None, quota_audit.STATE_FILE)   # its changes, at start
        return store

    def _tokens(self, loop: asyncio.AbstractEventLoop) -> TokenValidator | None:
        """`sasl.oauthbearer`: tokens checked against the JWKS kqp keeps fresh (`jwks.py`)."""
        oauth = self.config.sasl.oauthbearer
        if oauth is None or self.config.sasl.mode != "terminate":
            return None
        self.jwks = Jwks(oauth, loop)
        return TokenValidator(self.jwks.current, self.jwks.expedite, time.time, oauth.issuer, oauth.audience,
                              oauth.clock_skew_seconds, self.config.sasl.principal_claim)

    def _acl_store(self) -> AclStore | None:
        """`authorization.enabled`: the config file's ACLs with the state file's changes over them."""
        authorization = self.config.authorization
        if not authorization.enabled:
            return None
        return AclStore(authorization, self.acls.put, self.acl_audit)

    def _header_reader(self, loop: asyncio.AbstractEventLoop) -> HeaderReader | None:
        """`proxy_protocol:`: the listeners' PROXY-header step, its refusals logged as `kqp.proxy_protocol`."""
        config = self.config.proxy_protocol
        if config.mode == "off":
            return None
        refused = RefusalLog(self.observer, loop.time, logger=logging.getLogger("kqp.proxy_protocol"))
        return HeaderReader(loop, config, refused)

    def _listener_tls(self, refused: RefusalLog) -> tuple[ListenerTls | None, Callable[[bytes | None], str] | None]:
        """The listeners' TLS (a context that follows its files) and the certificate-to-user mapping."""
        tls = self.config.tls
        if tls is None:
            return None, None
        context = ReloadingContext("listener", lambda: server_context(tls), watched_files(tls))
        self.tls_contexts.append(context)
        return (ListenerTls(lambda: context.context, tls.handshake_timeout_ms / 1000, refused, self.admission),
                PeerIdentity(tls.principal_mapping_rules).user)

    def _upstream_tls(self) -> Callable[[str], dict[str, object]]:
        """What every upstream connection (forwarding and kqp's own requests) adds for TLS."""
        tls = self.config.upstream.tls
        if tls is None:
            return no_tls
        context = ReloadingContext("upstream", lambda: client_context(tls), watched_files(tls))
        self.tls_contexts.append(context)
        return UpstreamTls(context, tls.server_hostname).connect_args

    async def _start_metrics(self) -> None:
        listen = self.config.metrics.listen
        if listen is None:
            return
        observer = self.observer
        if isinstance(observer, PrometheusObserver):
            assert self.loop is not None
            observer.bind(self.loop.time, self.quotas, self.upstream_health, self.readiness)
            observer.clients.connections = self.connection_views
            registry = observer.registry
            if self.fleet is not None:
                registry.register(FleetCollector(self.fleet.status))
            registry.register(self.audit)
            registry.register(self.acl_audit)
            if self.authorization_log is not None:
                registry.register(self.authorization_log)
            self._tasks.append(self.loop.create_task(observer.maintain(self.stopping)))
        else:
            registry = CollectorRegistry()   # an observer of its own: health endpoints only
        prometheus = observer if isinstance(observer, PrometheusObserver) else None
        explain = Explainer(self.quotas, self.connection_views, self.loop.time,
                            None if prometheus is None else prometheus.recent,
                            budget_changes(self.quotas, self.loop.time),
                            None if prometheus is None else prometheus.recent_observed,
                            None if prometheus is None else prometheus.principals,
                            None if prometheus is None else prometheus.requests_of,
                            None if self.authorization_log is None else
                            partial(self._explain_authorization, self.authorization_log))
        self.endpoint = MetricsEndpoint(listen.host, listen.port, registry, self.readiness,
                                        lambda: prepare_scrape(observer), explain)
        try:
            await self.endpoint.start()
        except OSError as exc:
            raise BindError("metrics.listen", listen.host, listen.port, exc) from None
        log.info("metrics endpoint %s/metrics (health: /healthz, /readyz)", self.endpoint.url)

    # -- state the endpoint reads ----------------------------------------------------------------
    def _explain_authorization(self, denials: AuthorizationLog, user: str) -> dict[str, object]:
        return denials.explain(user, self.acls.authorizer)

    def connection_views(self) -> list[ConnectionView]:
        """The open connections as metrics and `kqp explain` see them: views of the cores, never the edges."""
        assert self.loop is not None
        now = self.loop.time()
        return [connection_view(edge.core, now) for edge in list(self.connections) if not edge.core.closed]

    def upstream_health(self) -> UpstreamHealth:
        assert self.loop is not None
        last = self.cluster.last_refresh_ok
        age = None if last is None else self.loop.time() - last   # the cluster stamps with the loop's clock
        return UpstreamHealth(age, 3 * self.config.upstream.metadata_refresh_ms / 1000)

    def readiness(self) -> tuple[bool, str]:
        """/readyz: listeners bound, upstream Metadata fresh, not shutting down; with the reason, and
        whether quotas are shared (a process enforcing its share alone still serves: still ready)."""
        ready, detail = self._readiness()
        if self.fleet is not None:
            detail = f"{detail}; {self.fleet.describe()}"
        return ready, detail

    def _readiness(self) -> tuple[bool, str]:
        if self.stopping.is_set():
            return False, "shutting down"
        if self.loop is None or not self.ready.is_set():
            detail = self.cluster.last_error if self.loop is not None else None
            return False, f"starting: waiting for the upstream{f' ({detail})' if detail else ''}"
        age, limit = self.upstream_health()
        if age is None or age > limit:
            since = "ever" if age is None else f"{age:.0f}s"
            error = f": {self.cluster.last_error}" if self.cluster.last_error else ""
            return False, f"upstream has not answered Metadata for {since} (limit {limit:g}s){error}"
        return True, f"ready (upstream Metadata {age:.0f}s old)"

    # -- life ------------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._assemble(loop)
        if self.fleet is not None:   # quotas are shared from the start, even before the upstream answers
            self._tasks.append(loop.create_task(self.fleet.run(self.stopping)))
        await self._start_metrics()   # first, so /healthz answers while kqp waits for the upstream
        if self.jwks is not None:   # tokens can be checked from the first login (a JWKS that fails: retried)
            await self.jwks.refresh()
            self._tasks.append(loop.create_task(self.jwks.run(self.stopping)))
        delay = 0.2
        while True:
            try:
                await self.cluster.refresh()
                break
            except ConnectionError as exc:
                log.warning("waiting for the upstream: %s (retrying in %.1fs)", exc, delay)
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
                return
            except TimeoutError:
                delay = min(delay * 2, START_RETRY_MAX_SECONDS)
        await self.listeners.settle()
        port = await self.listeners.start_bootstrap()
        self._tasks.append(loop.create_task(self.cluster.refresh_forever(self.stopping)))
        self._tasks.append(loop.create_task(self._reap_idle()))
        self._tasks.extend(loop.create_task(context.watch(self.stopping)) for context in self.tls_contexts)
        if self.store is not None:
            self._tasks.append(loop.create_task(self.store.watch(self.stopping)))
        if self.acl_store is not None:
            self._tasks.append(loop.create_task(self.acl_store.watch(self.stopping)))
        if self.config.source:
            reloader = ConfigReloader(self.config.source, self.config, self.update_quotas,
                                      on_result=self.observer.config_reload, apply_runtime=self._apply_runtime,
                                      overrides=self.overrides)
            self._tasks.append(loop.create_task(reloader.watch(self.stopping)))
        self.ready.set()
        log.info("kqp ready listen=%s:%d upstream brokers=%s", self.config.listen.host, port,
                 ",".join(f"{n}={hp}" for n, hp in sorted(self.cluster.brokers.items())))

    async def _reap_idle(self) -> None:
        """Kafka's connections.max.idle.ms: every connection is asked to look (`IdleCheck`); each
        decides for itself, muted or not. Also where idle quota sensors are dropped."""
        assert self.loop is not None
        while not self.stopping.is_set():
            # Read on every pass, at least once a second: a reload may change connections_max_idle_ms.
            idle = self.config.connections_max_idle_ms / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), min(max(idle / 10, 0.05), 1.0))
            now = self.loop.time()
            # Kafka drops a quota sensor after an hour unused; so does kqp, metrics endpoint or not.
            self.quotas.expire(now, self.config.metrics.entity_expiry_seconds)
            for edge in list(self.connections):
                edge.run(ev.IdleCheck(now))

    def _apply_runtime(self, config: ProxyConfig) -> None:
        """Settings that apply live besides quotas: fetch_throttle, connections_max_idle_ms (open
        connections included) and limits (to connections accepted, and requests read, from now on)."""
        self.config = dataclasses.replace(
            self.config, fetch_throttle=config.fetch_throttle, connections_max_idle_ms=config.connections_max_idle_ms,
            quotas=config.quotas, limits=config.limits)
        self.core.settings = core_settings(self.config)
        self.admission.limits.update(limit_settings(self.config))
        if self.acl_store is not None:   # ACLs, super users and default: the reloaded file's
            self.acl_store.rebase(dataclasses.replace(config.authorization, enabled=True,
                                                      state_file=self.acl_store.path))

    def update_quotas(self, settings: QuotaSettings) -> list[str]:
        """A config reload's quotas: the base layer, under the admin API's changes when kqp manages quotas."""
        if self.store is not None:
            return self.store.rebase(settings)   # audited by the store, which keeps the history
        before = self.quotas.settings
        lines = self.update_settings(settings)
        self.audit.record(before, settings, None, quota_audit.RELOAD)
        return lines

    def update_settings(self, settings: QuotaSettings) -> list[str]:
        assert self.loop is not None
        return self.quotas.update_settings(settings, self.loop.time())

    def _on_closed(self) -> None:
        if self._progress is not None:
            self._progress.set()

    async def shutdown(self) -> None:
        """Stop accepting; each connection drains what it owes and closes itself (`ShutdownBegun`);
        after `shutdown_grace_ms` whatever is still open is closed."""
        self.stopping.set()
        loop = self.loop
        if loop is None:
            return
        await self.listeners.close()
        self.admission.close()   # sockets held for a creation-rate throttle
        progress = self._progress = asyncio.Event()
        for edge in list(self.connections):
            edge.run(ev.ShutdownBegun(loop.time()))
        deadline = loop.time() + self.config.shutdown_grace_ms / 1000
        while self.connections and (left := deadline - loop.time()) > 0:
            progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), left)
        for edge in list(self.connections):
            edge.run(ev.CloseRequested(loop.time(), "shutdown"))
        self.delay.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.store is not None:
            self.store.close()
        if self.acl_store is not None:
            self.acl_store.close()
        if self.endpoint is not None:
            await self.endpoint.close()

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            await self.start()
            _settle_collector()
            await self.stopping.wait()
            log.info("kqp stopping: draining in-flight responses")
        finally:
            await self.shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("kqp stopped")
        return 0


# Allocations between two young collections while serving (CPython's default is 700): a request's
# objects die by reference count, so a larger young generation is mostly empty when it is collected.
GC_YOUNG_THRESHOLD = 50_000


def _settle_collector() -> None:
    """Young collections every `GC_YOUNG_THRESHOLD` allocations once kqp serves: at CPython's default,
    the cyclic collector took 2.6 % of the proxy's CPU through 1 MB and Spark-like produce and consume
    with every quota (timed by `gc.callbacks`), 0.6 % at this one. What start-up made (schemas, the
    code, the settings: some 60,000 objects) is then frozen out of the collector's sight: a full
    collection walked them all, 22 ms each time, and perf caught one in a Spark-like consume."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
    gc.collect()   # start-up's garbage first, or it would be frozen for good
    gc.freeze()
