"""Starting, watching and stopping the benchmark's server processes (brokers and proxies).

Every server runs as its own OS process so that each proxy's CPU and memory can be read from /proc
and no proxy shares a GIL with the clients driving it. Output goes to a log file rather than a pipe:
a pipe nobody drains would eventually block a chatty server mid-benchmark. A server counts as
started once its port accepts connections and, where it announces readiness on stderr (`kqp ready`,
`relay ready`), once that line has been written.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path


class StartError(RuntimeError):
    """A server did not come up; the message says why, with the tail of its log."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel has just handed out as free; the caller binds it soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _raise_fd_limit() -> None:
    # A proxy holding 1000 client connections needs two descriptors each; default soft limits of
    # 1024 would turn the connection workload into a file-descriptor test.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def raise_fd_limit() -> None:
    """Raise this process's open-file soft limit to its hard limit (clients call it too)."""
    _raise_fd_limit()


class Server:
    """One server subprocess with its log file; use as a context manager so it is always stopped."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, host: str, port: int,
                 ready_text: str | None = None, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.host = host
        self.port = port
        self.ready_text = ready_text
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def start(self, timeout: float = 15.0) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, preexec_fn=_raise_fd_limit, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                status = self.proc.returncode
                self.stop()  # the leader is gone; anything it forked goes with it
                raise StartError(self.name, f"{self.name} exited with status {status}: {self.log_tail()}")
            if self._ready():
                return self
            time.sleep(0.02)
        self.stop()
        raise StartError(self.name, f"{self.name} not ready within {timeout:.0f}s: {self.log_tail()}")

    def _ready(self) -> bool:
        if self.ready_text is not None and self.ready_text not in self.log_text():
            return False
        return port_open(self.host, self.port)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 6) -> str:
        tail = [line for line in self.log_text().splitlines() if line.strip()][-lines:]
        return " | ".join(tail) if tail else "(no output)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the server's process group, then SIGKILL it if it has not gone after `grace`."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        # The server leads its own session (start_new_session), so its group id is its pid and
        # signalling the group reaches forked workers as well, and nothing of ours.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        # Whatever of the group outlived the grace (or the leader's exit) goes now.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
