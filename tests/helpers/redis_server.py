"""A real redis-server for the fleet-quota tests: on a free 127.0.0.1 port, stopped when done.

Never a fake: the Lua script, TIME, key expiry and a password are what is under test. The server
keeps nothing on disk (`--save ''`, no AOF) and runs in the foreground of its own process, so a
test can kill it mid-run (SIGKILL, as a crashed Redis) and start it again on the same port (empty:
a restart without persistence, which the fleet sees as a new epoch). The `redis-server` binary comes
from the Debian package of that name (`.ci/run` installs it); without it these tests skip.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kqp.proxy.bench.redis_nodes import server_args

from .net import LOOPBACK, accepts, free_port

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (apt-get install "
                                                               "redis-server)")


class PortTaken(RuntimeError):
    """Another process took the server's port between choosing it and binding it (another xdist
    worker's server): its own redis-server exited, and the one answering there is not it."""


class RedisServer:
    def __init__(self, log_path: Path, *, password: str | None = None, port: int | None = None,
                 sentinel_config: Path | None = None, tls_cert: Path | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self._may_move = port is None   # a port of its own choosing, until it first started there
        self.password = password
        self.log_path = log_path
        self.sentinel_config = sentinel_config   # run as a Redis Sentinel with this (writable) config file
        # TLS only, with this self-signed certificate (key beside it, "<name>.key"); see `self_signed`.
        self.tls_cert = tls_cert
        self.extra_args = list(extra_args)    # e.g. a Redis Cluster node's (helpers.redis_cluster)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls_cert is not None:   # redis-py reads ssl_ca_certs from the URL's query
            return f"rediss://{auth}{LOOPBACK}:{self.port}/0?ssl_ca_certs={self.tls_cert}"
        return f"redis://{auth}{LOOPBACK}:{self.port}/0"

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start it and wait until it listens; a server on a port it chose itself moves to another
        free port if that one was taken meanwhile (`PortTaken` for a port given to it)."""
        for attempt in range(3):
            try:
                return self._start(timeout)
            except PortTaken:
                if not self._may_move or attempt == 2:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> RedisServer:
        assert REDIS_SERVER is not None, "redis-server is not installed"
        argv = [REDIS_SERVER, *server_args(self.port, LOOPBACK)]
        if self.sentinel_config is not None:
            argv = [REDIS_SERVER, str(self.sentinel_config), "--sentinel", "--port", str(self.port)]
        if self.tls_cert is not None:
            argv[1:3] = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls_cert),
                         "--tls-key-file", str(self.tls_cert.with_suffix(".key")),
                         "--tls-ca-cert-file", str(self.tls_cert), "--tls-auth-clients", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        argv += self.extra_args
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            since = log.tell()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        # Listening is what its own log says: a port that answers may be another worker's server's.
        ready = "Sentinel ID is" if self.sentinel_config is not None else "Ready to accept connections"
        deadline = time.monotonic() + timeout
        while not (ready in (said := self._log_since(since)) and accepts(LOOPBACK, self.port)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                taken = "Address already in use" in said
                raise (PortTaken if taken else RuntimeError)(f"redis-server did not start: {said[-2000:]}")
            time.sleep(0.02)
        self._may_move = False
        return self

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def kill(self) -> None:
        """As a crash: SIGKILL, nothing flushed."""
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def self_signed(directory: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 (and its key, `.key` beside it), made with openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert = directory / "redis.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    f"/CN={LOOPBACK}", "-addext", f"subjectAltName=IP:{LOOPBACK}", "-keyout",
                    str(cert.with_suffix(".key")), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert


@contextlib.contextmanager
def redis_server(log_path: Path, **options: object) -> Iterator[RedisServer]:
    server = RedisServer(log_path, **options)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
