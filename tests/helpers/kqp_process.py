"""Start kqp as a real subprocess from a YAML config, wait until it is ready, stop it cleanly.

End-to-end tests run kqp exactly as an operator would (`python -m kqp.proxy.tools.cli run --config F`),
so the CLI, config loading, signal handling and logging are under test too. Output is drained by a
thread into memory: a full pipe would otherwise stall kqp mid-test, and tests assert on log lines.
Readiness is the contract the CLI promises: a line containing `kqp ready`, and the bootstrap port
accepting connections; waiting is bounded (15 s by default) and a failure carries kqp's output.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import yaml

from .net import LOOPBACK, accepts, free_port, split_host_port

READY_MARKER = "kqp ready"
Wait = Literal["ready", "port", "none"]
DEFAULT_GRACE_MS = 10_000  # kqp's shutdown_grace_ms default
EXIT_MARGIN_SECONDS = 2.0


def kqp_command(*args: str) -> list[str]:
    """argv that runs the kqp CLI with the interpreter running the tests (the project's venv)."""
    return [sys.executable, "-m", "kqp.proxy.tools.cli", *args]


def kqp_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # log lines must reach the reader thread as they are written
    return env


def run_kqp_cli(*args: str, timeout: float = 30.0,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a short-lived kqp command (`check-config F`, a `run` expected to fail) to completion;
    `env` adds variables (a password the command reads from one)."""
    return subprocess.run(kqp_command(*args), capture_output=True, text=True, timeout=timeout,
                          env={**kqp_env(), **(env or {})}, stdin=subprocess.DEVNULL, check=False)


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, merging nested mappings (so `upstream={...}` keeps bootstrap_servers)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def kqp_config(upstream: str, /, quotas: Mapping[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    """The config mapping start_kqp writes: a free bootstrap port, ephemeral broker ports, `upstream`.

    `upstream` is positional-only so `upstream={"connect_timeout_ms": ...}` can still be merged
    into the file's `upstream:` section.
    """
    data: dict[str, Any] = {
        "listen": f"{LOOPBACK}:{free_port()}",
        "broker_port_base": 0,
        "upstream": {"bootstrap_servers": str(upstream)},  # plain str: safe_dump refuses subclasses
    }
    if quotas is not None:
        data["quotas"] = dict(quotas)
    return deep_merge(data, config)


def rewrite_config(path: Path, config: Mapping[str, Any], **changes: Any) -> None:
    """Replace a running kqp's config file the way a ConfigMap update does: a new file renamed over it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({**config, **changes}, sort_keys=False))
    os.replace(tmp, path)


class KqpProcess:
    """A running `kqp run` subprocess and everything it printed so far."""

    def __init__(self, proc: subprocess.Popen[str], config_path: Path, config: Mapping[str, Any]) -> None:
        self.proc = proc
        self.config_path = config_path
        self.config = dict(config)
        self.bootstrap: str = str(config["listen"])
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._drain, name="kqp-output", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def grace_seconds(self) -> float:
        return float(self.config.get("shutdown_grace_ms", DEFAULT_GRACE_MS)) / 1000.0

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self._lines.append(line.rstrip("\n"))

    def log_lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def logs(self) -> str:
        """Everything kqp wrote to stderr (and stdout) so far."""
        return "\n".join(self.log_lines())

    def wait_for_log(self, predicate: str, timeout: float = 10.0, *, after: int = 0) -> str:
        """The first line (from index `after`) containing `predicate`; TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_lines()[after:]:
                if predicate in line:
                    return line
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no kqp log line containing {predicate!r} within {timeout}s; "
                                   f"output:\n{self.logs()[-4000:]}")
            time.sleep(0.02)

    def wait_ready(self, timeout: float = 15.0, *, require_marker: bool = True) -> None:
        host, port = split_host_port(self.bootstrap)
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                self._reader.join(2)
                raise RuntimeError(f"kqp exited with {code} before it was ready; output:\n{self.logs()}")
            marked = not require_marker or any(READY_MARKER in line for line in self.log_lines())
            if marked and accepts(host, port):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"kqp not ready within {timeout}s; output:\n{self.logs()[-4000:]}")
            time.sleep(0.05)

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int | None:
        """Send `sig`, wait up to `timeout` (default: the grace time + 2 s for interpreter exit on a
        loaded machine); return the exit code, or None if it did not exit in time.

        A process that hangs past the timeout is killed so no test leaves one behind; the caller
        sees None and can fail with the output.
        """
        if timeout is None:
            timeout = self.grace_seconds + EXIT_MARGIN_SECONDS
        self.send_signal(sig)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
            self.kill()
        self._reader.join(2)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None


def start_kqp(directory: Path, upstream: str, /, quotas: Mapping[str, Any] | None = None, *,
              wait: Wait = "ready", timeout: float = 15.0, extra_args: Sequence[str] = (),
              open_files: int | None = None, **config: Any) -> KqpProcess:
    """Write `directory/kqp-N.yaml` and start `kqp run --config` on it.

    `wait="ready"` waits for the ready log line and the bootstrap port, `"port"` for the port only,
    `"none"` not at all (kqp pointed at an unreachable upstream never becomes ready).
    `open_files` caps the process's file descriptors (RLIMIT_NOFILE), to drive it out of them.
    """
    data = kqp_config(upstream, quotas, **config)
    directory.mkdir(parents=True, exist_ok=True)
    index = len(list(directory.glob("kqp-*.yaml")))
    path = directory / f"kqp-{index}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.Popen(kqp_command("run", "--config", str(path), *extra_args),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=kqp_env(),
                            preexec_fn=None if open_files is None else partial(_limit_files, open_files))
    kqp = KqpProcess(proc, path, data)
    if wait == "none":
        return kqp
    try:
        kqp.wait_ready(timeout, require_marker=wait == "ready")
    except BaseException:
        kqp.kill()
        raise
    return kqp


def _limit_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))
