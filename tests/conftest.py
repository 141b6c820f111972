"""Fixtures shared by the whole suite: upstream clusters and a kqp process factory.

Upstreams are session-scoped, so each pytest-xdist worker starts its own (sessions are per
worker) and tests keep apart through unique topic and group names (helpers.names). Everything a
fixture starts it also stops, and every wait is bounded. `kafka` is Apache Kafka itself, one KRaft
node from the jars tests/jvm/kafka/pom.xml resolves; `upstream` is parametrised over the three kinds
for the suites that run against each. Setting KQP_TEST_BOOTSTRAP=host:port makes every upstream
fixture yield that cluster instead.

This file lives in tests/ with no __init__.py beside it, so pytest puts tests/ on sys.path and the
shared code imports as `helpers` and `upstreams`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.fault_tap import FaultTap
from helpers.kqp_process import KqpProcess, Wait, deep_merge, start_kqp
from helpers.tls import TlsFiles
from upstreams import launch
from upstreams.kafka import KAFKA_USERS, KafkaCluster, Tls
from upstreams.launch import Upstream
from upstreams.provisioned import kafka_or_skip

StartKqp = Callable[..., KqpProcess]


@pytest.fixture(scope="session")
def mock_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """A 3-broker librdkafka mock cluster: "h:p,h:p,h:p" (an `Upstream` with kind "mock")."""
    real = launch.real_cluster()
    if real is not None:
        yield real
        return
    with launch.mock_cluster(tmp_path_factory.mktemp("mock") / "mock-cluster.log") as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """A single Tansu broker with memory storage: "127.0.0.1:PORT" (kind "tansu")."""
    real = launch.real_cluster()
    if real is not None:
        yield real
        return
    with launch.tansu(tmp_path_factory.mktemp("tansu") / "tansu.log") as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def kafka_certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """The CA and server certificate of the session's Kafka node's SSL and MTLS listeners (trustme)."""
    return TlsFiles(tmp_path_factory.mktemp("kafka-tls"))


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory, kafka_certs: TlsFiles) -> Iterator[KafkaCluster]:
    """The session's Apache Kafka node itself: PLAINTEXT (`bootstrap`), SASL_PLAINTEXT with the users
    `KAFKA_USERS` (SCRAM-SHA-256/512 and PLAIN), SSL, and MTLS (client certificates from
    `kafka_certs`' CA required); for the tests of Kafka's own listeners. Skipped with KQP_TEST_BOOTSTRAP."""
    if launch.real_cluster() is not None:
        pytest.skip("KQP_TEST_BOOTSTRAP is set: this test needs the Kafka node the suite launches")
    tls = Tls(kafka_certs.server_cert, kafka_certs.server_key, client_ca=kafka_certs.ca_path)
    with kafka_or_skip(tmp_path_factory.mktemp("kafka"), scram_users=KAFKA_USERS, tls=tls) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka(request: pytest.FixtureRequest) -> Upstream:
    """One Apache Kafka KRaft node (broker and controller): "127.0.0.1:PORT" (kind "kafka"), its
    PLAINTEXT listener."""
    real = launch.real_cluster()
    if real is not None:
        return real
    cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
    return cluster.bootstrap


UPSTREAM_KINDS = {"mock": "mock_cluster", "tansu": "tansu", "kafka": "kafka"}


@pytest.fixture(params=sorted(UPSTREAM_KINDS))
def upstream(request: pytest.FixtureRequest) -> Upstream:
    """Each upstream kind in turn (the mock, Tansu, Apache Kafka): for the suites that run against all three."""
    return request.getfixturevalue(UPSTREAM_KINDS[request.param])


@pytest.fixture
def fault_tap(tansu: Upstream) -> Iterator[FaultTap]:
    """The Tansu broker behind a fault tap (`helpers.fault_tap`): give kqp `",".join(tap.hops.values())`."""
    if tansu.kind != "tansu":
        pytest.skip("the fault tap needs the Tansu fixture's broker (KQP_TEST_BOOTSTRAP is set)")
    with FaultTap("upstream") as tap:
        tap.relay(tansu)
        yield tap


@pytest.fixture
def kqp(tmp_path: Path) -> Iterator[StartKqp]:
    """Factory: `kqp(upstream, quotas=None, *, wait="ready", timeout=15.0, **config) -> KqpProcess`.

    Writes a YAML config (free bootstrap port, `broker_port_base: 0`, the upstream, `quotas` as
    the quotas section, other keyword arguments merged in as top-level keys) and starts
    `python -m kqp.proxy.tools.cli run --config FILE`, waiting up to 15 s for readiness (`wait="port"`:
    only for the bootstrap port; `"none"`: not at all). An `Upstream` from the fixtures adds the
    settings its kind needs (`Upstream.kqp_settings()`: the mock's API version caps). At teardown
    every process still running gets SIGTERM and must exit 0 within its shutdown grace time.
    """
    started: list[KqpProcess] = []

    def start(upstream: str, /, quotas: dict[str, Any] | None = None, *, wait: Wait = "ready",
              timeout: float = 15.0, **config: Any) -> KqpProcess:
        if isinstance(upstream, Upstream):
            config = deep_merge(upstream.kqp_settings(), config)  # explicit settings win
        try:
            process = start_kqp(tmp_path / "kqp", upstream, quotas, wait=wait, timeout=timeout, **config)
        except (TimeoutError, RuntimeError) as exc:
            # kqp could not start: the upstream's side of the story belongs in the same report.
            tail = upstream.log_tail() if isinstance(upstream, Upstream) else ""
            if tail:
                exc.add_note(f"{upstream.kind} upstream log (tail):\n{tail}")
            raise
        started.append(process)
        return process

    yield start

    failures: list[str] = []
    for process in started:
        if not process.running:
            continue  # the test stopped it and asserted on that itself
        code = process.stop(signal.SIGTERM)
        if code != 0:
            failures.append(f"kqp (pid {process.pid}) exited with {code} after SIGTERM "
                            f"(grace {process.grace_seconds}s); output:\n{process.logs()[-4000:]}")
    assert not failures, "\n\n".join(failures)
