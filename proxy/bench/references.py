"""The references the benchmark compares, and how each one is brought up on a fresh upstream.

Every cell (one reference in one round) gets its own Tansu broker with memory storage: Tansu keeps
every record it is given (about 1.4 GB of RSS after 1.3 GB produced), so a broker shared by the run
would make later references run against a fuller, slower broker. The relay cannot rewrite broker
addresses, so in its cell the broker advertises the relay's address.

The TLS references measure what mutual TLS costs kqp: with `tls="client"` the clients speak TLS to
kqp and kqp plaintext to the broker; with `tls="both"` kqp also speaks TLS upstream, to the broker
behind the bench relay terminating TLS (Tansu's own TLS does not work in the version shipped). That
relay is in the path of `kqp-tls-both`'s MB/s, not in kqp's CPU per GB, which counts kqp only.
A reference with `saturated` (C, bytes/s) puts the saturated relay (saturated_relay.py) between kqp
and the broker, which advertises the relay: every request then waits in one FIFO drained at C.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import kqp_target
from .certificates import CLIENT_NAME, BenchCerts, bench_certs
from .processes import Server, free_port

HOST = "127.0.0.1"
BROKER = "tansu broker"  # the upstream's server name, to tell its failures from a proxy's
SATURATED_C = 400_000.0  # the saturated references' broker capacity, bytes/s


@dataclass(frozen=True)
class Reference:
    name: str
    kind: str  # direct | relay | tansu-proxy | kqp
    description: str
    kqp_variant: str = "none"
    workers: int = 1
    tls: str = ""    # "", "client" (clients to kqp) or "both" (and kqp to the broker)
    workloads: tuple[str, ...] = ()   # what it measures, when not the base workloads
    command: tuple[str, ...] = ()     # another kqp build's console command (a baseline); else this tree's
    saturated: float = 0.0            # C of a saturated relay in front of the broker (0: none)
    opt_in: bool = False              # run only when --references or --workloads name it


REFERENCES: tuple[Reference, ...] = (
    Reference("direct", "direct", "clients straight to the broker: the limit"),
    Reference("relay", "relay", "bare uvloop byte relay, no Kafka parsing: the least a Python proxy costs"),
    Reference("tansu-proxy", "tansu-proxy", "`tansu proxy`, a Kafka proxy written in Rust"),
    Reference("kqp", "kqp", "kqp, no quotas configured"),
    Reference("kqp-quotas", "kqp", "kqp, every quota type at every entity level, none exceeded",
              kqp_variant="every-entity"),
    Reference("kqp-pool", "kqp", "kqp-quotas and a capacity pool every client is in, its budget never reached",
              kqp_variant="every-entity-pool"),
    Reference("kqp-metrics-quotas", "kqp", "kqp, metrics endpoint on and every quota as kqp-quotas, none exceeded",
              kqp_variant="metrics-quotas"),
    Reference("kqp-throttled", "kqp", "kqp, byte-rate quota below the path's speed for every client id",
              kqp_variant="throttle"),
    Reference("kqp-tls", "kqp", "kqp, mutual TLS from the clients, plaintext to the broker", tls="client"),
    Reference("kqp-tls-both", "kqp", "kqp, mutual TLS from the clients and TLS to the broker (behind a "
              "TLS-terminating relay)", tls="both"),
    Reference("kqp-cluster", "kqp", "kqp-quotas in cluster scope: usage shared through a redis-server every 100 ms",
              kqp_variant="every-entity-cluster"),
    Reference("kqp-producer-rate", "kqp", "kqp, a producer_byte_rate never reached: pipelined requests forwarded "
              "as they come", kqp_variant="producer-rate", workloads=("produce-inflight5",)),
    Reference("kqp-request-rate", "kqp", "kqp, a request_rate never reached: one request at a time per "
              "connection (response_pending)", kqp_variant="request-rate", workloads=("produce-inflight5",)),
    Reference("kqp-adaptive", "kqp", "kqp, an adaptive pool for a stream and four batch jobs on a broker saturated "
              "at 400 kB/s", kqp_variant="adaptive-pool", workloads=("classes",), saturated=SATURATED_C, opt_in=True),
    Reference("kqp-classes", "kqp", "kqp-adaptive with service classes: the stream's class above the batch jobs'",
              kqp_variant="classes", workloads=("classes",), saturated=SATURATED_C, opt_in=True),
)
TLS_WORKLOADS = ["produce", "consume"]   # what the TLS references measure: bytes through TLS
REDIS = "redis-server"


def baseline_reference(spec: str) -> Reference:
    """`kqp bench --baseline [LABEL=]PATH`: the kqp build in checkout PATH, no quotas, as
    `kqp-LABEL` (`kqp-baseline` without a label), measured in the same rounds as this tree's kqp."""
    label, sep, path = spec.partition("=")
    if not sep:
        label, path = "baseline", spec
    if not label or not path:
        raise ValueError(f"expected [LABEL=]PATH, got {spec!r}")
    root = Path(path).expanduser()
    return Reference(f"kqp-{label}", "kqp", f"kqp built from {root} (a baseline), no quotas",
                     command=tuple(kqp_target.baseline_command(root)))


def workers_reference(workers: int) -> Reference:
    return Reference(f"kqp-workers-{workers}", "kqp", f"kqp run --workers {workers}, no quotas",
                     workers=workers)


@dataclass
class CellSettings:
    tansu_bin: str
    workdir: Path
    throttle_bytes_s: float


@dataclass
class Cell:
    """One running reference: where clients connect, where the broker is, which pid to measure."""

    reference: Reference
    host: str
    port: int
    upstream: str
    broker: Server
    proxy: Server | None
    client_conf: dict[str, str] = field(default_factory=dict)   # librdkafka settings (TLS) for clients
    upstream_conf: dict[str, str] = field(default_factory=dict)  # and for reaching `upstream` (TLS)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def _broker(settings: CellSettings, tag: str, advertised_port: int | None = None) -> Server:
    port = free_port()
    advertised = advertised_port or port
    argv = [settings.tansu_bin, "broker", "--listener-url", f"tcp://{HOST}:{port}",
            "--advertised-listener-url", f"tcp://{HOST}:{advertised}", "--storage-engine", "memory://tansu/"]
    return Server(BROKER, argv, settings.workdir / f"{tag}-broker.log", host=HOST, port=port)


def _certs(settings: CellSettings) -> BenchCerts:
    return bench_certs(settings.workdir / "tls")


def _tls_relay(settings: CellSettings, tag: str, port: int, upstream_port: int) -> Server:
    certs = _certs(settings)
    argv = [sys.executable, "-m", "kqp.proxy.bench.relay", "--listen", f"{HOST}:{port}",
            "--upstream", f"{HOST}:{upstream_port}", "--tls-cert", str(certs.server_cert),
            "--tls-key", str(certs.server_key)]
    return Server("tls relay", argv, settings.workdir / f"{tag}-tls-relay.log", host=HOST, port=port,
                  ready_text="relay ready")


def _kqp_tls(ref: Reference, settings: CellSettings) -> dict[str, object]:
    if not ref.tls:
        return {}
    certs = _certs(settings)
    sections: dict[str, object] = {"tls": {
        "cert": str(certs.server_cert), "key": str(certs.server_key), "client_ca": str(certs.ca),
        "principal_mapping_rules": [f"RULE:^CN=({CLIENT_NAME}).*$/$1/", "DEFAULT"]}}
    if ref.tls == "both":
        sections["upstream_tls"] = {"ca": str(certs.ca)}
    return sections


def redis_unavailable() -> str | None:
    """Why the cluster reference cannot run here, or None."""
    return None if shutil.which(REDIS) else "redis-server is not installed (apt-get install redis-server)"


def _redis(settings: CellSettings, tag: str) -> Server:
    port = free_port()
    argv = [shutil.which(REDIS) or REDIS, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]
    return Server(REDIS, argv, settings.workdir / f"{tag}-redis.log", host=HOST, port=port)


def _saturated(settings: CellSettings, tag: str, port: int, upstream_port: int, capacity: float) -> Server:
    argv = [sys.executable, "-m", "kqp.proxy.bench.saturated_relay", "--listen", f"{HOST}:{port}",
            "--upstream", f"{HOST}:{upstream_port}", "--capacity", str(capacity)]
    return Server("saturated relay", argv, settings.workdir / f"{tag}-saturated-relay.log", host=HOST, port=port,
                  ready_text="saturated relay ready")


def _proxy(ref: Reference, settings: CellSettings, tag: str, upstream_port: int, port: int,
           redis_url: str | None = None) -> Server:
    log = settings.workdir / f"{tag}-proxy.log"
    upstream = f"{HOST}:{upstream_port}"
    if ref.kind == "relay":
        argv = [sys.executable, "-m", "kqp.proxy.bench.relay", "--listen", f"{HOST}:{port}", "--upstream", upstream]
        return Server("relay", argv, log, host=HOST, port=port, ready_text="relay ready")
    if ref.kind == "tansu-proxy":
        argv = [settings.tansu_bin, "proxy", "--listener-url", f"tcp://{HOST}:{port}",
                "--advertised-listener-url", f"tcp://{HOST}:{port}", "--origin-url", f"tcp://{upstream}"]
        return Server("tansu proxy", argv, log, host=HOST, port=port)
    if ref.kind == "kqp":
        pinned = _broker_listener_port() if ref.workers > 1 else None
        config = kqp_target.config_for(ref.kqp_variant, port, upstream, settings.throttle_bytes_s, pinned,
                                       redis_url=redis_url, **_kqp_tls(ref, settings))  # type: ignore[arg-type]
        path = kqp_target.write_config(settings.workdir / f"{tag}.yaml", config)
        argv = [*(ref.command or kqp_target.kqp_command()), "run", "--config", str(path)]
        if ref.workers > 1:
            argv += ["--workers", str(ref.workers)]
        return Server(ref.name, argv, log, host=HOST, port=port, ready_text="kqp ready")
    raise ValueError(f"no proxy for reference kind {ref.kind!r}")


@contextlib.contextmanager
def open_cell(ref: Reference, settings: CellSettings, tag: str) -> Iterator[Cell]:
    """Start a fresh broker and, unless `direct`, the reference's proxy in front of it."""
    with contextlib.ExitStack() as stack:
        if ref.kind == "direct":
            broker = stack.enter_context(_broker(settings, tag))
            yield Cell(ref, HOST, broker.port, broker_address(broker), broker, None)
            return
        proxy_port = free_port()
        relay_port = free_port() if ref.tls == "both" or ref.saturated else None
        advertised = proxy_port if ref.kind == "relay" else relay_port
        broker = stack.enter_context(_broker(settings, tag, advertised))
        redis_url = None
        if ref.kqp_variant.endswith("-cluster"):   # a Redis of its own per cell, as the broker
            redis = stack.enter_context(_redis(settings, tag))
            redis_url = f"redis://{HOST}:{redis.port}/0"
        upstream_port = broker.port
        if relay_port is not None and ref.saturated:
            upstream_port = stack.enter_context(_saturated(settings, tag, relay_port, broker.port, ref.saturated)).port
        elif relay_port is not None:
            upstream_port = stack.enter_context(_tls_relay(settings, tag, relay_port, broker.port)).port
        proxy = stack.enter_context(_proxy(ref, settings, tag, upstream_port, proxy_port, redis_url))
        client_conf = _certs(settings).librdkafka() if ref.tls else {}
        if relay_port is None or ref.saturated:   # the saturated relay speaks plaintext: topics go through it
            yield Cell(ref, HOST, proxy_port, broker_address(broker), broker, proxy, client_conf)
            return
        # The broker advertises the TLS relay: topics are made and seeded through it, over TLS.
        upstream_conf = {"security.protocol": "SSL", "ssl.ca.location": str(_certs(settings).ca)}
        yield Cell(ref, HOST, proxy_port, f"{HOST}:{relay_port}", broker, proxy, client_conf, upstream_conf)


def _broker_listener_port() -> int:
    # A free port above the Tansu node id, so that base = port - node id is a valid base.
    while (port := free_port()) <= kqp_target.TANSU_NODE_ID:
        pass
    return port


def broker_address(broker: Server) -> str:
    return f"{broker.host}:{broker.port}"
