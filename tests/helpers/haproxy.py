"""A real HAProxy (Debian's `haproxy`) started by a test in front of kqp, in TCP mode.

`HaProxy(directory, frontends)` writes a config with one frontend per `Frontend` (bound on its own
address and port) and its backend (one server, kqp's listener, with `send-proxy` (v1),
`send-proxy-v2` or neither, and optionally a `source` address the balancer connects from), starts
`haproxy -db` (foreground, no daemon), and waits, bounded, until a probe frontend accepts: HAProxy
binds every frontend before it serves any, so the others are bound then too. The probe forwards
nowhere (`tcp-request connection reject`), so waiting costs kqp nothing. `stop()` (or leaving the
`with` block) terminates it and waits for it; its output is kept for a failing test's report.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .net import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
START_TIMEOUT = 15.0


@dataclass(frozen=True)
class Frontend:
    name: str
    bind: tuple[str, int]              # where clients connect
    server: tuple[str, int]            # kqp's listener behind it
    send_proxy: str | None = "v2"      # "v1" (send-proxy), "v2" (send-proxy-v2) or None
    source: str | None = None          # the address HAProxy connects to kqp from (default: the kernel's choice)


def available() -> bool:
    return Path(HAPROXY).exists()


class HaProxy:
    def __init__(self, directory: Path, frontends: list[Frontend], probe_host: str = "127.0.0.1") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / "haproxy.cfg"
        self.log_path = directory / "haproxy.log"
        self.probe = (probe_host, free_port(probe_host))
        self.config_path.write_text(self._config(frontends))
        check = subprocess.run([HAPROXY, "-c", "-f", str(self.config_path)], capture_output=True, text=True,
                               timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its config:\n{check.stdout}{check.stderr}")
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config_path)], stdout=self._log,
                                     stderr=subprocess.STDOUT)
        try:
            self._wait_bound()
        except BaseException:
            self.stop()
            raise

    def _config(self, frontends: list[Frontend]) -> str:
        # retries 0: HAProxy would connect again when kqp closes a connection at once (a refusal), and
        # tests count kqp's refusals one per client connection.
        lines = ["global", "  maxconn 2000", "defaults", "  mode tcp", "  retries 0", "  timeout connect 5s",
                 "  timeout client 120s", "  timeout server 120s",
                 "frontend probe", f"  bind {self.probe[0]}:{self.probe[1]}", "  tcp-request connection reject"]
        for front in frontends:
            option = {"v1": " send-proxy", "v2": " send-proxy-v2", None: ""}[front.send_proxy]
            lines += [f"frontend {front.name}", f"  bind {front.bind[0]}:{front.bind[1]}",
                      f"  default_backend {front.name}_kqp", f"backend {front.name}_kqp"]
            if front.source is not None:
                lines.append(f"  source {front.source}")
            lines.append(f"  server kqp {front.server[0]}:{front.server[1]}{option}")
        return "\n".join(lines) + "\n"

    def _wait_bound(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}: {self.output()}")
            try:
                with socket.create_connection(self.probe, timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"haproxy did not bind within {START_TIMEOUT}s: {self.output()}")

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()

    def __enter__(self) -> HaProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
