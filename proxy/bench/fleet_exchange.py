"""What one fleet exchange costs with many active entities: one Redis against a Redis Cluster.

    python -m kqp.proxy.bench.fleet_exchange [--entities 1000,10000] [--exchanges 40] [--out DIR]

Starts one Redis with a replica and a Redis Cluster of three masters and three replicas
(redis_nodes.py: loopback, nothing on disk), so both layouts pay for replication alike, then drives
the real exchange (kqp's `FleetLedger` and the backend `kqp run` uses) as a busy process does:
every entity used in every interval, two processes taking turns. It prints per case the wall time
per exchange (median, p99), this process's CPU per exchange, and Redis's (INFO's used_cpu_* over
the run, idle subtracted), then the cluster's figures as ratios of one Redis's. A measurement, not
a test: the numbers move with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from kqp.config.fleet_section import redis_target
from kqp.proxy.runtime.fleet.redis_cluster import GROUPS, RedisClusterExchange
from kqp.proxy.runtime.fleet.redis_store import RedisExchange
from kqp.quotas.fleet.ledger import FleetLedger

from .processes import Server
from .redis_nodes import (
    HOST,
    REDIS_CLI,
    REDIS_SERVER,
    cluster_node_args,
    cluster_port,
    create_cluster,
    server_args,
    wait_replicas_synced,
)

DEADLINE = 30.0   # no exchange here is cut short: the cost is what is measured


@dataclass
class Case:
    layout: str
    entities: int
    exchange_ms: list[float]
    process_cpu_ms: float          # per exchange
    masters_cpu_ms: list[float]    # per exchange, per master
    replicas_cpu_ms: float         # per exchange, all replicas together


@dataclass
class Nodes:
    url: str
    masters: list[int]
    replicas: list[int]


def _cpu(port: int) -> float:
    with redis.Redis(host=HOST, port=port, socket_timeout=5) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _roles(ports: list[int]) -> tuple[list[int], list[int]]:
    masters, replicas = [], []
    for port in ports:
        with redis.Redis(host=HOST, port=port, socket_timeout=5) as client:
            (masters if client.info("replication")["role"] == "master" else replicas).append(port)
    return masters, replicas


@contextlib.contextmanager
def start_nodes(workdir: Path) -> Iterator[dict[str, Nodes]]:
    """One redis-server with a replica, and a cluster of three masters with a replica each."""
    assert REDIS_SERVER is not None and REDIS_CLI is not None, "needs redis-server and redis-cli"
    with contextlib.ExitStack() as stack:
        port, replica = cluster_port(), cluster_port()
        stack.enter_context(Server("redis-server", [REDIS_SERVER, *server_args(port)], workdir / "redis.log",
                                   host=HOST, port=port))
        argv = [REDIS_SERVER, *server_args(replica), "--replicaof", HOST, str(port), "--dir", str(workdir)]
        stack.enter_context(Server("redis replica", argv, workdir / "redis-replica.log", host=HOST, port=replica))
        wait_replicas_synced([replica])
        ports = [cluster_port() for _ in range(6)]
        for p in ports:
            argv = [REDIS_SERVER, *server_args(p), *cluster_node_args(workdir / "nodes", p, 15000)]
            stack.enter_context(Server(f"cluster node {p}", argv, workdir / f"node-{p}.log", host=HOST, port=p))
        create_cluster(ports, replicas=1)
        masters, replicas = _roles(ports)
        yield {"redis": Nodes(f"redis://{HOST}:{port}/0", [port], [replica]),
               "cluster": Nodes("redis+cluster://" + ",".join(f"{HOST}:{p}" for p in ports) + "/", masters, replicas)}


async def measure(layout: str, nodes: Nodes, entities: int, exchanges: int) -> Case:
    target = redis_target(nodes.url)
    kind = RedisClusterExchange if target.cluster_nodes else RedisExchange
    backend = kind(target, None, f"bench{entities}", DEADLINE)
    offset = time.time() - time.monotonic()
    processes = [FleetLedger(f"p{i}", f"bench-{i}", 1.0, 11, 2, 0.1, clock_offset=offset) for i in range(2)]
    names = [f"producer_byte_rate:user-{k % 97}:client-{k}" for k in range(entities)]
    loop = asyncio.get_running_loop()

    async def once(ledger: FleetLedger) -> tuple[float, float]:
        now = time.monotonic()
        for name in names:
            ledger.usage_for(name, now).record(1000.0, now)
        cpu, sent = time.process_time(), time.monotonic()
        request = ledger.collect(now)
        reply, _ = await backend.exchange(request, loop.time() + DEADLINE)
        received = time.monotonic()
        ledger.merge(request, reply, sent, received)
        return received - sent, time.process_time() - cpu

    try:
        for ledger in processes:   # warm up: slot map, scripts loaded, every key created
            await once(ledger)
        ports = nodes.masters + nodes.replicas
        first = [_cpu(p) for p in ports]
        await asyncio.sleep(2.0)
        idle = [(_cpu(p) - cpu) / 2.0 for p, cpu in zip(ports, first, strict=True)]   # cluster bus, cron
        before = [_cpu(p) for p in ports]
        started = time.monotonic()
        walls, cpus = [], []
        for i in range(exchanges):
            wall, cpu = await once(processes[i % 2])
            walls.append(wall * 1000)
            cpus.append(cpu * 1000)
        elapsed = time.monotonic() - started
        used = [max(0.0, _cpu(p) - b - rate * elapsed) * 1000 / exchanges
                for p, b, rate in zip(ports, before, idle, strict=True)]
    finally:
        await backend.close()
    masters = len(nodes.masters)
    return Case(layout, entities, walls, statistics.median(cpus), used[:masters], sum(used[masters:]))


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def table(cases: list[Case]) -> str:
    lines = ["| layout | entities | exchange median ms | p99 ms | kqp CPU ms | Redis CPU ms: masters (busiest) "
             "| replicas |", "|---|---|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c.layout} | {c.entities:,} | {statistics.median(c.exchange_ms):.1f} | "
                     f"{_p99(c.exchange_ms):.1f} | {c.process_cpu_ms:.1f} | "
                     f"{sum(c.masters_cpu_ms):.1f} ({max(c.masters_cpu_ms):.1f}) | {c.replicas_cpu_ms:.1f} |")
    lines += ["", "cluster / one Redis:"]
    for entities in sorted({c.entities for c in cases}):
        one = next((c for c in cases if c.layout == "redis" and c.entities == entities), None)
        many = next((c for c in cases if c.layout == "cluster" and c.entities == entities), None)
        if one is None or many is None:
            continue
        lines.append(f"  {entities:,} entities: exchange median "
                     f"{statistics.median(many.exchange_ms) / statistics.median(one.exchange_ms):.2f}, "
                     f"p99 {_p99(many.exchange_ms) / _p99(one.exchange_ms):.2f}, "
                     f"kqp CPU {many.process_cpu_ms / one.process_cpu_ms:.2f}, masters' CPU "
                     f"{sum(many.masters_cpu_ms) / max(sum(one.masters_cpu_ms), 1e-9):.2f}, the busiest master's "
                     f"{max(many.masters_cpu_ms) / max(sum(one.masters_cpu_ms), 1e-9):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kqp.proxy.bench.fleet_exchange",
                                     description="What one fleet exchange costs: one Redis against a Redis Cluster.")
    parser.add_argument("--entities", default="1000,10000", help="comma-separated active entity counts")
    parser.add_argument("--exchanges", type=int, default=40, help="measured exchanges per case")
    parser.add_argument("--out", type=Path, default=Path("bench-results/fleet-exchange"), help="logs folder")
    args = parser.parse_args(argv)
    if REDIS_SERVER is None or REDIS_CLI is None:
        print("needs redis-server and redis-cli (apt-get install redis-server)", file=sys.stderr)
        return 2
    counts = [int(n) for n in args.entities.split(",") if n.strip()]
    cases: list[Case] = []
    with start_nodes(args.out) as layouts:
        for entities in counts:
            for layout in ("redis", "cluster"):
                case = asyncio.run(measure(layout, layouts[layout], entities, args.exchanges))
                print(f"{layout} x {entities:,}: median {statistics.median(case.exchange_ms):.1f} ms", flush=True)
                cases.append(case)
    print(f"\n{GROUPS} slot groups on the cluster; every entity sends a delta in every exchange.\n")
    print(table(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
