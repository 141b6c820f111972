"""A real Redis Cluster for the fleet-quota tests: three masters and three replicas on loopback ports.

Six `helpers.redis_server.RedisServer`s in cluster mode (a node's nodes.conf in the test's folder,
nothing else on disk), formed with `redis-cli --cluster create ... --cluster-replicas 1
--cluster-yes` as an operator would (kqp.proxy.bench.redis_nodes, which the cost benchmark shares),
ready once every node says `cluster_state:ok`. `cluster-node-timeout` is short (500 ms), so a
SIGKILLed master is failed over by its replica within a few seconds. Everything started is stopped
at the end, killed nodes included; every wait is bounded. Needs `redis-server` and `redis-cli`
(Debian's redis-server package depends on redis-tools, which has the latter).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis

from kqp.proxy.bench.redis_nodes import (
    REDIS_CLI,
    cluster_info,
    cluster_node_args,
    cluster_port,
    create_cluster,
    node_client,
    slot_owners,
    wait_cluster_ok,
)

from .net import LOOPBACK
from .redis_server import REDIS_SERVER, PortTaken, RedisServer

needs_redis_cluster = pytest.mark.skipif(REDIS_SERVER is None or REDIS_CLI is None,
                                         reason="redis-server and redis-cli are not installed "
                                                "(apt-get install redis-server)")
NODE_TIMEOUT_MS = 500


class RedisClusterNodes:
    """`masters` x (1 + `replicas`) cluster nodes; `url` is what kqp's `redis_url` takes."""

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 1, *,
                 node_timeout_ms: int = NODE_TIMEOUT_MS, extra_args: Sequence[str] = (),
                 tls_cert: Path | None = None) -> None:
        self.replicas = replicas
        self.ca = tls_cert   # TLS only (clients, the cluster bus, replication), with this self-signed cert
        tls = ["--tls-cluster", "yes", "--tls-replication", "yes"] if tls_cert is not None else []
        def node(i: int) -> RedisServer:
            port = cluster_port()
            return RedisServer(directory / f"node-{i}.log", port=port, tls_cert=tls_cert, extra_args=[
                *cluster_node_args(directory / "nodes", port, node_timeout_ms), *tls, *extra_args])

        self._node = node
        self.nodes: list[RedisServer] = [node(i) for i in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        nodes = ",".join(node.address for node in self.nodes)
        if self.ca is not None:   # redis-py reads ssl_ca_certs from the URL's query, as for rediss://
            return f"rediss+cluster://{nodes}/?ssl_ca_certs={self.ca}"
        return f"redis+cluster://{nodes}/"

    def live(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.proc is not None]

    def start(self, timeout: float = 60.0) -> RedisClusterNodes:
        try:
            for i in range(len(self.nodes)):
                for attempt in range(3):   # a port (or its bus port) another worker's server took meanwhile
                    try:
                        self.nodes[i].start()
                        break
                    except PortTaken:
                        if attempt == 2:
                            raise
                        self.nodes[i] = self._node(i)
            create_cluster([node.port for node in self.nodes], self.replicas, timeout, ca=self.ca)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def master_of(self, key: str) -> RedisServer:
        """The live master that serves `key`'s slot now."""
        port = self.live()[0].port
        with node_client(port, LOOPBACK, self.ca) as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        [owner] = [master for first, last, master, _ in slot_owners(port, LOOPBACK, self.ca) if first <= slot <= last]
        return next(node for node in self.nodes if node.port == owner)

    def masters(self) -> list[RedisServer]:
        owners = {master for _, _, master, _ in slot_owners(self.live()[0].port, LOOPBACK, self.ca)}
        return [node for node in self.nodes if node.port in owners]

    def wait_replicated(self, timeout: float = 10.0) -> None:
        """Until every live master's replicas have acknowledged all it has written."""
        deadline = time.monotonic() + timeout
        for master in self.masters():
            with node_client(master.port, LOOPBACK, self.ca) as client:
                while True:
                    info = client.info("replication")
                    offsets = [int(v["offset"]) for k, v in info.items()
                               if k.startswith("slave") and isinstance(v, dict)]
                    if offsets and min(offsets) >= int(info["master_repl_offset"]):
                        break
                    assert time.monotonic() < deadline, f"master {master.port} not replicated: {info}"
                    time.sleep(0.02)

    def wait_healed(self, lost: RedisServer, timeout: float = 30.0) -> float:
        """Seconds until the live nodes agree the cluster is ok with `lost`'s slots served by another
        node (its replica promoted); TimeoutError after `timeout`."""
        started = time.monotonic()
        while True:
            live = [node.port for node in self.live()]
            try:
                ok = all(cluster_info(port, LOOPBACK, self.ca).get("cluster_state") == "ok" for port in live) and \
                    all(master != lost.port for _, _, master, _ in slot_owners(live[0], LOOPBACK, self.ca))
            except (redis.RedisError, OSError):
                ok = False
            if ok:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"the cluster did not fail over node {lost.port} within {timeout:.0f}s")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = 30.0) -> float:
        return wait_cluster_ok([node.port for node in self.live()], timeout, ca=self.ca)
