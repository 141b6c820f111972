"""Apache Kafka as a test upstream: one or three KRaft nodes (broker and controller in one JVM each).

The jars come from tests/jvm/kafka/pom.xml (`jvm.jars("kafka")`). `KafkaCluster` writes each node's
server.properties on free loopback ports, formats its storage with one cluster id (SCRAM users are
written at format time, as `kafka-storage format --add-scram` does), starts `kafka.Kafka`, and is
ready once every broker shows in a Metadata answer and the group coordinator has loaded every
`__consumer_offsets` partition. Each node has a PLAINTEXT listener (the cluster's
`bootstrap`), and optionally SASL_PLAINTEXT (SCRAM and PLAIN), SSL and MTLS (SSL requiring a client
certificate) listeners, for tests that log in to Kafka's own listeners. Settings favour a quick
start on two cores: four-partition internal topics, no initial rebalance delay, 500 ms KIP-848
heartbeats, a short broker session so a killed node's partitions move in seconds (`kill`, `restart`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives import serialization
from helpers.coordinator import GROUP, find_coordinator
from helpers.net import LOOPBACK, accepts, free_port
from helpers.raw_client import RawConnection, Tally

from kqp.protocol.apis import ApiKey

from . import jvm
from .launch import Upstream

KIND = "kafka"
OFFSETS_PARTITIONS = 4
START_TIMEOUT = 90.0
STOP_TIMEOUT = 15.0
JVM_OPTIONS = ["-Xms128m", "-Xmx768m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
LOG4J = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: state.change.logger
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
# The users the suite's session node knows (tests/conftest.py `kafka_cluster`): kqp's own login, a client's.
KAFKA_USERS = {"kqp": "kqp-secret", "alice": "alice-secret"}


@dataclass(frozen=True)
class Tls:
    """A PEM certificate chain and key for Kafka's SSL listener; `client_ca` set: also an MTLS listener,
    which requires a client certificate from that CA."""

    certificate_chain: Path
    private_key: Path
    client_ca: Path | None = None


@dataclass
class KafkaNode:
    node_id: int
    ports: dict[str, int]            # listener name -> port (PLAINTEXT, CONTROLLER, SASL_PLAINTEXT, SSL, MTLS)
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    jmx_port: int | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.directory / "kafka.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"{LOOPBACK}:{self.ports[listener]}"


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (`kafka-storage random-uuid`).

    Never one starting with "-", which `kafka-storage format -t` would read as an option (1 id in 64);
    Kafka's own `Uuid.randomUuid` draws again for the same reason."""
    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return found


class KafkaCluster:
    """`nodes` KRaft nodes on loopback; a context manager that starts them and stops every one."""

    def __init__(self, directory: Path, nodes: int = 1, *, scram_users: Mapping[str, str] | None = None,
                 tls: Tls | None = None, properties: Mapping[str, str] | None = None, jmx: bool = False) -> None:
        self.directory = directory
        self.scram_users = dict(scram_users or {})
        self.tls = tls
        self.properties = dict(properties or {})
        self.cluster_id = cluster_id()
        listeners = ["PLAINTEXT", "CONTROLLER"]
        if self.scram_users:
            listeners.append("SASL_PLAINTEXT")
        if tls is not None:
            listeners.append("SSL")
            if tls.client_ca is not None:
                listeners.append("MTLS")
        self.nodes = [KafkaNode(i, {name: free_port() for name in listeners}, directory / f"node-{i}")
                      for i in range(1, nodes + 1)]
        if jmx:   # Kafka's own metrics over JMX, on loopback, unauthenticated (`jmx_url`)
            for node in self.nodes:
                node.jmx_port = free_port()
        self._classpath = jvm.classpath("kafka")
        self._java = jvm.java()

    # -- addresses -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> Upstream:
        """The PLAINTEXT listeners, as the fixtures hand upstreams out."""
        return Upstream(self.listener("PLAINTEXT"), KIND, self.nodes[0].log)

    def listener(self, name: str) -> str:
        return ",".join(node.address(name) for node in self.nodes)

    def jmx_url(self, node_id: int = 1) -> str:
        """The JMX service URL of a node started with `jmx=True` (Kafka's JmxTool reads it)."""
        return f"service:jmx:rmi:///jndi/rmi://{LOOPBACK}:{self.node(node_id).jmx_port}/jmxrmi"

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    # -- life ------------------------------------------------------------------------------------
    def __enter__(self) -> KafkaCluster:
        try:
            self._format_all()
            for node in self.nodes:
                self._start(node)
            self.wait_ready()
            self.wait_groups_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _server_properties(self, node: KafkaNode) -> str:
        n = len(self.nodes)
        voters = ",".join(f"{m.node_id}@{m.address('CONTROLLER')}" for m in self.nodes)
        names = [name for name in node.ports]
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                     "SSL": "SSL", "MTLS": "SSL"}
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(f"{name}://{node.address(name)}" for name in names),
            "advertised.listeners": ",".join(f"{name}://{node.address(name)}" for name in names
                                             if name != "CONTROLLER"),
            "listener.security.protocol.map": ",".join(f"{name}:{protocols[name]}" for name in names),
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(min(3, n)),
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": str(min(3, n)),
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(min(3, n)),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # KIP-848 groups: the broker sets the members' heartbeat (default 5 s, never below the
            # minimum, also 5 s); a member's join or leave then takes a few heartbeats to settle.
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.session.timeout.ms": "6000",
            "group.consumer.session.timeout.ms": "6000",
            # Several nodes: a short broker session, so a killed node's partitions move in seconds.
            # One node has nowhere to move them, and a session a starved machine can miss fences the
            # only broker (NOT_LEADER, NOT_COORDINATOR, "all brokers are currently fenced").
            "broker.heartbeat.interval.ms": "500" if n > 1 else "2000",
            "broker.session.timeout.ms": "3000" if n > 1 else "30000",
            "controlled.shutdown.enable": "true",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        if self.scram_users:
            props.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
                "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    + " ".join(f'user_{user}="{password}"' for user, password in self.scram_users.items()) + ";",
            })
        if self.tls is not None:
            # Kafka reads a PEM chain and key inline; the key unencrypted (no ssl.key.password) and PKCS#8.
            for name in ("ssl", "mtls") if self.tls.client_ca is not None else ("ssl",):
                props.update({
                    f"listener.name.{name}.ssl.keystore.type": "PEM",
                    f"listener.name.{name}.ssl.keystore.certificate.chain": _pem_line(self.tls.certificate_chain),
                    f"listener.name.{name}.ssl.keystore.key": _pkcs8_line(self.tls.private_key),
                })
            if self.tls.client_ca is not None:
                props.update({
                    "listener.name.mtls.ssl.client.auth": "required",
                    "listener.name.mtls.ssl.truststore.type": "PEM",
                    "listener.name.mtls.ssl.truststore.certificates": _pem_line(self.tls.client_ca),
                })
        props.update(self.properties)
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _format_all(self) -> None:
        """Format every node's storage, the nodes' JVMs side by side (one takes seconds to start)."""
        formats = [(node, self._format(node)) for node in self.nodes]
        for node, proc in formats:
            try:
                out, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed for node {node.node_id}: {out}")

    def _format(self, node: KafkaNode) -> subprocess.Popen[str]:
        node.directory.mkdir(parents=True, exist_ok=True)
        (node.directory / "server.properties").write_text(self._server_properties(node))
        (node.directory / "log4j2.yaml").write_text(LOG4J)
        scram = [arg for user, password in self.scram_users.items() for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                 for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")]
        return subprocess.Popen(
            [self._java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={node.directory / 'log4j2.yaml'}",
             "-cp", self._classpath, "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
             "-c", str(node.directory / "server.properties"), *scram],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _start(self, node: KafkaNode) -> None:
        jmx = [] if node.jmx_port is None else [
            f"-Dcom.sun.management.jmxremote.port={node.jmx_port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={node.jmx_port}",
            "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
            f"-Dcom.sun.management.jmxremote.host={LOOPBACK}", f"-Djava.rmi.server.hostname={LOOPBACK}"]
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                [self._java, *JVM_OPTIONS, *jmx, f"-Dlog4j2.configurationFile={node.directory / 'log4j2.yaml'}",
                 "-cp", self._classpath, "kafka.Kafka", str(node.directory / "server.properties")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = START_TIMEOUT, brokers: int | None = None) -> None:
        """Until `brokers` (default: every running node) show in a Metadata answer of each running node."""
        running = [n for n in self.nodes if n.running]
        wanted = len(running) if brokers is None else brokers
        admins: dict[int, AdminClient] = {}

        def missing() -> str | None:
            if not all(accepts(LOOPBACK, node.ports["PLAINTEXT"]) for node in running):
                return "not listening yet"
            try:
                for node in running:   # librdkafka's own retries stay quiet: log_level 0
                    admins.setdefault(node.node_id, AdminClient({"bootstrap.servers": node.address(),
                                                                 "log_level": 0}))
                seen = {len(admin.list_topics(timeout=2).brokers) for admin in admins.values()}
            except Exception as exc:   # no metadata yet
                return repr(exc)
            return None if seen == {wanted} else f"brokers seen: {sorted(seen)}"

        self._until(missing, timeout, "kafka not ready")

    def wait_groups_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until the group coordinator has loaded every `__consumer_offsets` partition.

        The first FindCoordinator creates that topic, and each partition's coordinator then loads it;
        until then JoinGroup answers COORDINATOR_LOAD_IN_PROGRESS, which some clients (kafkajs) report
        as a crash. Many groups starting at once on a fresh, busy node met it. Asked over plain
        sockets: with a librdkafka AdminClient's OffsetFetch here, the pytest-xdist worker running the
        fidelity matrix died without a signal or a traceback in 3 runs of 3 (why is not known)."""
        waiting = [group_on_partition(partition, OFFSETS_PARTITIONS) for partition in range(OFFSETS_PARTITIONS)]

        def missing() -> str | None:
            while waiting:   # one group per partition, each asked until its partition has loaded
                try:
                    why = self._group_not_ready(waiting[0])
                except OSError as exc:   # ConnectionError and timeouts included
                    why = repr(exc)
                if why is not None:
                    return f"{waiting[0]}: {why}"
                waiting.pop(0)
            return None

        self._until(missing, timeout, "kafka's group coordinator not ready")

    def _until(self, missing: Callable[[], str | None], timeout: float, what: str) -> None:
        """Ask `missing` every 0.25 s until it says nothing is (None); a running node that exits
        meanwhile fails at once, and a timeout says what was missing last, with the log's tail."""
        running = [n for n in self.nodes if n.running]
        deadline = time.monotonic() + timeout
        while True:
            for node in running:
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(f"kafka node {node.node_id} exited with {node.process.returncode}:\n"
                                       f"{self.log_tail(node)}")
            why = missing()
            if why is None:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} within {timeout:.0f}s ({why}):\n{self.log_tail(running[0])}")
            time.sleep(0.25)

    def _group_not_ready(self, group: str) -> str | None:
        """Why `group`'s coordinator cannot serve it yet, or None once it can."""
        error, host, port = find_coordinator(self.nodes[0].address(), group, GROUP, 1, timeout=5)
        if error:
            return f"FindCoordinator error {error}"
        with RawConnection(f"{host}:{port}", "kqp-ready", Tally(), timeout=5) as connection:
            _, answer = connection.call(ApiKey.DescribeGroups, 0, "DescribeGroups", groups=[group])
        code = answer.groups[0].error_code   # type: ignore[attr-defined]
        return f"DescribeGroups error {code}" if code else None

    def kill(self, node_id: int) -> None:
        """SIGKILL one node: its partitions' leadership moves once its broker session expires (3 s)."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait(STOP_TIMEOUT)

    def restart(self, node_id: int) -> None:
        node = self.node(node_id)
        self.kill(node_id)
        self._start(node)
        self.wait_ready()

    def stop(self) -> None:
        live = [n for n in self.nodes if n.running]
        for node in live:
            assert node.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for node in live:
            assert node.process is not None
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(STOP_TIMEOUT)

    def log_tail(self, node: KafkaNode | None = None, chars: int = 4000) -> str:
        node = node or self.nodes[0]
        return node.log.read_text(errors="replace")[-chars:] if node.log.exists() else ""


def _pem_line(path: Path) -> str:
    """A PEM file as one properties value (Kafka reads inline PEM with its line breaks escaped)."""
    return path.read_text().strip().replace("\n", "\\n")


def _pkcs8_line(path: Path) -> str:
    """A PEM private key as one properties value in PKCS#8, the only PEM key form Kafka loads (trustme
    writes EC keys as SEC1, `BEGIN EC PRIVATE KEY`, which Kafka refuses: "algid parse error")."""
    key = serialization.load_pem_private_key(path.read_bytes(), None)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem.decode().strip().replace("\n", "\\n")


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` of an ASCII string, as a signed 32-bit int."""
    code = 0
    for ch in text:
        code = (31 * code + ord(ch)) & 0xFFFFFFFF
    return code - (1 << 32) if code >= 1 << 31 else code


def offsets_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of `group`: Kafka's `Utils.abs(hashCode) % partitions`."""
    code = java_string_hash(group)
    return (0 if code == -(1 << 31) else abs(code)) % partitions


def group_on_partition(partition: int, partitions: int) -> str:
    """A group id that Kafka's coordinator places on `__consumer_offsets` partition `partition`."""
    return next(g for n in range(10_000) if offsets_partition(g := f"kqp-ready-{n}", partitions) == partition)


@contextlib.contextmanager
def kafka_cluster(directory: Path, nodes: int = 1, **options: object) -> Iterator[KafkaCluster]:
    with KafkaCluster(directory, nodes, **options) as cluster:   # type: ignore[arg-type]
        yield cluster
