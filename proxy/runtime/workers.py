"""`kqp run --workers N`: N proxy processes sharing the listening ports through SO_REUSEPORT.

One event loop saturates one core; past that, the kernel spreads new client connections over N
processes that each bind the same ports with SO_REUSEPORT. A connection stays in the process that
accepted it, so per-connection ordering and muting are unchanged. Each worker serves its own metrics
on `metrics.listen` port + worker index, so every worker can be scraped.

The workers hold one quota, not N: each measures locally and exchanges its usage per entity every
sync interval. In cluster scope they exchange with Redis, each worker an instance of the fleet;
otherwise the parent serves the exchange itself (fleet/local.py), so `--workers` needs nothing
installed to keep Kafka's per-instance semantics.

The parent supervises: it forwards SIGTERM/SIGINT/SIGHUP, serves the workers' exchange, and exits with
the worst exit code.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from kqp.config.errors import ConfigError
from kqp.config.model import HostPort, ProxyConfig
from kqp.proxy.runtime.fleet.local import WorkersExchangeServer

log = logging.getLogger("kqp.workers")


@dataclass(frozen=True)
class WorkerSeat:
    """One worker's place: its index, how many there are, and the parent's exchange (if it serves one)."""

    index: int
    workers: int
    exchange_path: str | None


def check_workers(config: ProxyConfig, workers: int) -> None:
    """Several processes can share ports only if every port is fixed in advance."""
    if workers < 1:
        raise ConfigError("--workers", "must be at least 1")
    if workers == 1:
        return
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--workers", "needs SO_REUSEPORT, which this platform lacks")
    if config.listen.port == 0 or (config.broker_port_base == 0 and not config.broker_ports):
        raise ConfigError("--workers", "needs fixed ports: set listen and broker_port_base (not 0)")


def worker_config(config: ProxyConfig, index: int) -> ProxyConfig:
    metrics = config.metrics
    if metrics.listen is not None and metrics.listen.port != 0:
        metrics = dataclasses.replace(metrics, listen=HostPort(metrics.listen.host, metrics.listen.port + index))
    return dataclasses.replace(config, metrics=metrics)


def run_workers(config: ProxyConfig, workers: int, run_one: Callable[[ProxyConfig, WorkerSeat], int]) -> int:
    """Fork `workers` children running `run_one`; supervise them until they all exit."""
    # Bound before forking, served after (no thread may exist at fork time). In cluster scope the
    # workers share through Redis and the parent serves nothing.
    exchange = WorkersExchangeServer() if config.fleet.scope == "instance" else None
    try:
        return _supervise(config, workers, run_one, exchange)
    finally:
        if exchange is not None:
            exchange.close()


def _supervise(config: ProxyConfig, workers: int, run_one: Callable[[ProxyConfig, WorkerSeat], int],
               exchange: WorkersExchangeServer | None) -> int:
    children: dict[int, int] = {}
    for index in range(workers):
        pid = os.fork()
        if pid == 0:  # child
            os.environ["KQP_WORKER"] = str(index)
            code = 1
            try:
                if exchange is not None:
                    exchange.close_in_worker()
                code = run_one(worker_config(config, index),
                               WorkerSeat(index, workers, exchange.path if exchange is not None else None))
            finally:
                os._exit(code)
        children[pid] = index
    if exchange is not None:
        exchange.serve()
    log.info("kqp started %d workers: %s", workers, ", ".join(str(p) for p in children))

    def forward(signum: int, _frame: object) -> None:
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    worst = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        index = children.pop(pid, None)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            log.error("worker %s (pid %d) exited with %d; stopping the others", index, pid, code)
            forward(signal.SIGTERM, None)
            worst = max(worst, code if code > 0 else 1)
    time.sleep(0)  # let log handlers flush
    sys.stderr.flush()
    return worst
