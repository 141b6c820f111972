"""How the benchmark runs kqp itself: the command, what it supports, and one config per variant.

The variants (`none`, `every-entity`, `metrics-quotas`, `throttle`, `every-entity-pool`,
`every-entity-cluster`, `producer-rate`, `request-rate`, `adaptive-pool`, `classes`) are the
references proxy/README.md lists ("The benchmark"): the proxy alone, accounting that never binds
(with metrics, a pool, or cluster scope), a quota enforced, one request at a time for response-side
quotas, and an adaptive pool on a saturated broker without and with service classes.

kqp is driven through its command line, run by this very interpreter (`python -m
kqp.proxy.tools.cli`): the kqp measured is the one the harness is imported from, where a `kqp`
console script on disk may belong to another install. If the command refuses to start, kqp is
recorded as unavailable with the reason, so the rest of the benchmark stays usable. A baseline
(`kqp bench --baseline [LABEL=]PATH`) is another build, run by its own checkout's interpreter with
the `none` config, which every build reads.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# A limit no loopback benchmark reaches: accounting runs, throttling never triggers.
_UNREACHABLE = {
    "producer_byte_rate": 1e12,
    "consumer_byte_rate": 1e12,
    "request_percentage": 1e6,  # percent of one thread (KIP-124), i.e. ten thousand loops
    "request_rate": 1e9,
    "controller_mutation_rate": 1e9,
    "producer_record_rate": 1e12,
    "producer_batch_rate": 1e12,
    "consumer_record_rate": 1e12,
    "consumer_batch_rate": 1e12,
}

THROTTLE_WINDOW_SECONDS = 0.2
TANSU_NODE_ID = 111  # the node id a Tansu broker reports for itself
BENCH_CLIENT_IDS = ("kqp-bench-produce", "kqp-bench-consume", "kqp-bench-latency")


def _quota_types() -> tuple[str, ...]:
    try:
        from kqp.quotas.model import QUOTA_TYPES
    except ImportError:
        return tuple(_UNREACHABLE)
    return tuple(map(str, QUOTA_TYPES))   # plain text: yaml.safe_dump writes no StrEnum


def _every_entity() -> list[dict[str, Any]]:
    """One entry per precedence level, most specific first (the order Kafka resolves them in)."""
    limits = {name: _UNREACHABLE.get(name, 1e12) for name in _quota_types()}
    user, default = "ANONYMOUS", "<default>"
    entries: list[dict[str, Any]] = []
    for client in BENCH_CLIENT_IDS:
        entries.append({"user": user, "client_id": client, **limits})
    entries.append({"user": user, "client_id": default, **limits})
    entries.append({"user": user, **limits})
    for client in BENCH_CLIENT_IDS:
        entries.append({"user": default, "client_id": client, **limits})
    entries.append({"user": default, "client_id": default, **limits})
    entries.append({"user": default, **limits})
    for client in BENCH_CLIENT_IDS:
        entries.append({"client_id": client, **limits})
    entries.append({"client_id": default, **limits})
    return entries


def config_for(variant: str, listen_port: int, upstream: str, throttle_bytes_s: float,
               broker_port: int | None = None, tls: dict[str, Any] | None = None,
               upstream_tls: dict[str, Any] | None = None, redis_url: str | None = None) -> dict[str, Any]:
    """The YAML document (as a dict) for one kqp variant.

    Broker listeners get ephemeral ports unless `broker_port` pins the one upstream broker's
    (`kqp run --workers` needs fixed ports: every worker must bind the same ones). `tls` and
    `upstream_tls` are the `tls:` and `upstream.tls:` sections of the TLS references.
    """
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{listen_port}",
        "broker_port_base": 0,  # ephemeral per-broker ports: several kqp may run side by side
        "upstream": {"bootstrap_servers": [upstream]},
    }
    if broker_port is not None:
        config["broker_port_base"] = broker_port - TANSU_NODE_ID
    if tls is not None:
        config["tls"] = tls
    if upstream_tls is not None:
        config["upstream"]["tls"] = upstream_tls
    if variant in ("every-entity", "metrics-quotas", "every-entity-pool"):
        config["quotas"] = {"entities": _every_entity()}
        if variant == "every-entity-pool":
            config["quotas"]["pools"] = [{"name": "bench", "producer_byte_rate": _UNREACHABLE["producer_byte_rate"],
                                          "consumer_byte_rate": _UNREACHABLE["consumer_byte_rate"],
                                          "members": [{"client_id_prefix": "kqp-bench-"}]}]
        if variant == "metrics-quotas":
            config["metrics"] = {"listen": "127.0.0.1:0"}  # an ephemeral port: nobody scrapes it
    elif variant == "every-entity-cluster":
        if redis_url is None:
            raise ValueError("the cluster variant needs a Redis")
        config["quotas"] = {"entities": _every_entity(), "scope": "cluster",
                            "cluster": {"redis_url": redis_url, "sync_interval_ms": 100}}
    elif variant == "throttle":
        # Short windows so the measured rate settles on the quota within a benchmark run: Kafka's
        # rate counts a fresh sensor's window as (window_count - 1) x window_size long, which lets
        # a burst of that many seconds' worth of quota through before the first throttle.
        config["quotas"] = {"window_size_seconds": THROTTLE_WINDOW_SECONDS, "entities": [{
            "client_id": "<default>",
            "producer_byte_rate": throttle_bytes_s,
            "consumer_byte_rate": throttle_bytes_s,
        }]}
    elif variant in ("adaptive-pool", "classes"):
        # The service-classes workload's pool (README "Service classes"): a stream and batch jobs, 0.2 s windows.
        pool: dict[str, Any] = {"name": "ingest", "producer_byte_rate": 10_000_000,
                                "members": [{"client_id_prefix": "job-"}], "adaptive": {"target_latency_ms": 100}}
        if variant == "classes":
            pool["classes"] = [{"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
                               {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]
        config["quotas"] = {"window_size_seconds": THROTTLE_WINDOW_SECONDS, "pools": [pool]}
    elif variant in ("producer-rate", "request-rate"):
        quota = "producer_byte_rate" if variant == "producer-rate" else "request_rate"
        config["quotas"] = {"entities": [{"client_id": "<default>", quota: _UNREACHABLE[quota]}]}
    elif variant != "none":
        raise ValueError(f"unknown kqp variant {variant!r}")
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def kqp_command() -> list[str]:
    """kqp's console command, ``kqp.proxy.tools.cli``, run by this interpreter with its import path.

    Not a ``kqp`` script found on disk: one left behind by an older install names the entry point as
    it was then, and an editable install's finder still resolves it, so the benchmark would time
    other code than the kqp the harness imports (and report it as kqp). The module run by the same
    interpreter is the console command of exactly the kqp under test.
    """
    return [sys.executable, "-m", "kqp.proxy.tools.cli"]


def baseline_command(path: Path) -> list[str]:
    """The console command of another kqp build: `path` is a checkout with its own `.venv` (whose
    editable install runs that tree), or an interpreter that imports the build to measure.

    `kqp bench --baseline` runs it beside this tree's kqp in the same rounds, so a before/after
    comparison is paired by round as every other ratio is.
    """
    python = path / ".venv" / "bin" / "python" if path.is_dir() else path
    if not python.exists():
        raise ValueError(f"{path}: no .venv/bin/python there (make one: python3 -m venv .venv && "
                         ".venv/bin/pip install -e .)")
    return [str(python), "-m", "kqp.proxy.tools.cli"]


@dataclass(frozen=True)
class KqpSupport:
    """What this build of kqp can do, found out once from `kqp run --help`."""

    available: bool
    reason: str
    workers: bool


def probe(command: list[str] | None = None) -> KqpSupport:
    """What `command` (default: this tree's kqp) supports, from its `run --help`."""
    try:
        done = subprocess.run([*(command or kqp_command()), "run", "--help"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return KqpSupport(False, f"`kqp run --help` failed: {exc}", False)
    text = done.stdout + done.stderr
    if done.returncode != 0 or "--config" not in text:
        tail = " | ".join(line for line in text.strip().splitlines()[-3:]) or "(no output)"
        return KqpSupport(False, f"`kqp run --help` exited {done.returncode}: {tail}", False)
    return KqpSupport(True, "", "--workers" in text)
