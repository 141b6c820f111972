"""Throwaway Redis servers on loopback for measuring and testing fleet quotas: one, or a Redis Cluster.

The fleet-cost benchmark (`fleet_exchange.py`) and the tests (tests/helpers/redis_cluster.py) both
run Debian's `redis-server` the way kqp's fleet wants it, with nothing on disk (the fleet's data
is a few numbers per entity with a TTL), and form a Redis Cluster exactly as an operator would:
`redis-server --cluster-enabled yes` per node, then `redis-cli --cluster create ... --cluster-replicas
N`, then wait until every node reports `cluster_state:ok`. Starting and stopping the processes is
the caller's (the benchmark's `Server`, the tests' `RedisServer`); this module only says how to
start them and forms the cluster out of them. Every wait is bounded.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis

HOST = "127.0.0.1"
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")   # Debian's redis-server depends on redis-tools, which has it
BUS_OFFSET = 10000                       # a cluster node also listens on port + 10000 (the cluster bus)


def server_args(port: int, host: str = HOST) -> list[str]:
    """redis-server in the foreground, on `host:port`, keeping nothing on disk (a replica too: it
    loads what its master sends straight into memory rather than through a dump.rdb)."""
    return ["--port", str(port), "--bind", host, "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--protected-mode", "no", "--repl-diskless-load", "on-empty-db"]


def cluster_port(host: str = HOST, attempts: int = 200) -> int:
    """A free port whose cluster bus port (port + 10000, fixed by Redis) is free too."""
    for _ in range(attempts):
        with socket.socket() as first:
            first.bind((host, 0))
            port = int(first.getsockname()[1])
            if port + BUS_OFFSET > 65535:
                continue
            with socket.socket() as bus:
                try:
                    bus.bind((host, port + BUS_OFFSET))
                except OSError:
                    continue
        return port
    raise RuntimeError(f"no port p with p and p + {BUS_OFFSET} free after {attempts} tries")


def cluster_node_args(directory: Path, port: int, node_timeout_ms: int) -> list[str]:
    """What makes a server a Redis Cluster node. Its nodes.conf is the only file it writes (a
    cluster node needs one); `node_timeout_ms` is how long a silent master takes to be failed over,
    about the gap a kill opens (Redis's default, 15 s, is for real networks)."""
    directory.mkdir(parents=True, exist_ok=True)
    # A replica syncs at once instead of after Redis's 5 s diskless-sync delay: a master killed
    # before its replica had synced would have nobody to take over.
    return ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
            "--cluster-node-timeout", str(node_timeout_ms), "--dir", str(directory),
            "--repl-diskless-sync-delay", "0"]


def node_client(port: int, host: str = HOST, ca: Path | None = None) -> redis.Redis:
    """A plain client for one node; over TLS, trusting `ca`, when the nodes speak TLS."""
    tls = {"ssl": True, "ssl_ca_certs": str(ca)} if ca is not None else {}
    return redis.Redis(host=host, port=port, socket_timeout=2, socket_connect_timeout=2, **tls)


def create_cluster(ports: Sequence[int], replicas: int, timeout: float = 60.0, host: str = HOST,
                   ca: Path | None = None) -> None:
    """`redis-cli --cluster create` over the running nodes, then wait until the cluster is ok.

    With `replicas` 1 and six nodes: three masters, each with one replica, the 16384 slots in
    three even ranges. `ca`: the nodes speak TLS only, with a certificate `ca` signs.
    """
    if REDIS_CLI is None:
        raise RuntimeError("redis-cli is not installed (Debian: redis-tools, a dependency of redis-server)")
    argv = [REDIS_CLI, *(["--tls", "--cacert", str(ca)] if ca is not None else []), "--cluster", "create",
            *(f"{host}:{port}" for port in ports), "--cluster-replicas", str(replicas), "--cluster-yes"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"redis-cli --cluster create failed ({done.returncode}): {done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    wait_cluster_ok(ports, timeout, host=host, ca=ca)


def cluster_info(port: int, host: str = HOST, ca: Path | None = None) -> dict[str, str]:
    """CLUSTER INFO of one node as a dict (`cluster_state`, `cluster_known_nodes`, ...)."""
    with node_client(port, host, ca) as client:
        info = client.execute_command("CLUSTER INFO")   # redis-py parses it into a dict
    return {str(key): str(value) for key, value in info.items()}


def replica_link(port: int, host: str = HOST, ca: Path | None = None) -> str | None:
    """A replica's `master_link_status` ("up" once synced); None for a master."""
    with node_client(port, host, ca) as client:
        info = client.info("replication")
    return None if info.get("role") == "master" else str(info.get("master_link_status"))


def wait_replicas_synced(ports: Sequence[int], timeout: float = 30.0, host: str = HOST) -> None:
    """Until every replica among `ports` reports its link to its master up."""
    deadline = time.monotonic() + timeout
    while not all(replica_link(port, host) in (None, "up") for port in ports):
        if time.monotonic() > deadline:
            raise TimeoutError(f"replicas {list(ports)} not synced within {timeout:.0f}s")
        time.sleep(0.05)


def wait_cluster_ok(ports: Sequence[int], timeout: float, host: str = HOST, ca: Path | None = None) -> float:
    """Seconds until every node in `ports` says `cluster_state:ok` and knows all of them, and every
    replica among them has synced with its master; raise TimeoutError after `timeout`."""
    started = time.monotonic()
    last: object = None
    while True:
        try:
            infos = [cluster_info(port, host, ca) for port in ports]
            links = [replica_link(port, host, ca) for port in ports]
            if all(i.get("cluster_state") == "ok" and int(i.get("cluster_known_nodes", 0)) >= len(ports)
                   for i in infos) and all(link in (None, "up") for link in links):
                return time.monotonic() - started
            last = [(i.get("cluster_state"), i.get("cluster_known_nodes"), link)
                    for i, link in zip(infos, links, strict=True)]
        except (redis.RedisError, OSError) as exc:
            last = exc
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the Redis Cluster on {list(ports)} was not ok within {timeout:.0f}s: {last}")
        time.sleep(0.05)


def slot_owners(port: int, host: str = HOST, ca: Path | None = None) -> list[tuple[int, int, int, list[int]]]:
    """CLUSTER SLOTS as (first slot, last slot, master port, replica ports), read from one node."""
    with node_client(port, host, ca) as client:
        ranges = client.execute_command("CLUSTER SLOTS")
    return [(int(r[0]), int(r[1]), int(r[2][1]), [int(n[1]) for n in r[3:]]) for r in ranges]
