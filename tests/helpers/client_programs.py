"""Client programs in other languages (tests/clients/), built once and run as subprocesses.

Every program speaks the command line of tests/clients/README.md and prints one JSON report as its
last line; `ClientProgram` runs it (`produce`, `consume`, or `start` for a run the test watches
while it goes). `built` keeps each build in `.cache/clients/<name>-<hash of its inputs>/`, made
under a file lock so two pytest-xdist workers build once and later sessions reuse it;
`KQP_CLIENTS_CACHE` moves the cache. `unavailable` skips a test when a toolchain is missing, and
fails it under CI=true, where .ci/run has installed everything. The per-language wrappers
(go_clients.py, node_clients.py) say how each program is built.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "tests" / "clients"
CACHE = Path(os.environ.get("KQP_CLIENTS_CACHE") or ROOT / ".cache" / "clients")
DRAIN_SECONDS = 60.0      # the contract's wait for outstanding acknowledgements
EXIT_SLACK_SECONDS = 30.0  # start-up, group leave, close


class ToolMissing(RuntimeError):
    """A toolchain or system package the build needs is not installed."""


def unavailable(reason: str) -> NoReturn:
    """Skip (fail under CI=true, where .ci/run installs every toolchain) for want of `reason`."""
    if os.environ.get("CI"):
        pytest.fail(f"client program unavailable on CI: {reason}")
    pytest.skip(reason)


def digest(files: Iterable[Path], *extra: str) -> str:
    """A short hash of the files' names and contents and of `extra` (toolchain versions)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:12]


def built(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The folder `build` fills for `name` at `key`, building it the first time (under a lock)."""
    folder = CACHE / f"{name}-{key}"
    if (folder / ".complete").exists():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another worker may be building the same thing
        if (folder / ".complete").exists():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        build(partial)
        (partial / ".complete").touch()
        partial.rename(folder)
    return folder


def run_tool(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float,
             what: str) -> subprocess.CompletedProcess[str]:
    """Run a build step; RuntimeError with its output when it fails."""
    done = subprocess.run(list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n"
                           f"{(done.stdout + done.stderr)[-4000:]}")
    return done


@dataclass
class Running:
    """A client program under way: `result()` waits for its report."""

    argv: list[str]
    process: subprocess.Popen[bytes]
    timeout: float
    out: IO[bytes]
    err: IO[bytes]

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """A run the test left behind (it failed before `result()`) is killed, not left running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.out.close()
        self.err.close()

    def done(self) -> bool:
        return self.process.poll() is not None

    def result(self) -> dict[str, Any]:
        """The JSON report, with the program's stderr under "stderr"; RuntimeError when it could not run."""
        try:
            code = self.process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        self.out.seek(0)
        self.err.seek(0)
        stdout, stderr = self.out.read().decode(errors="replace"), self.err.read().decode(errors="replace")
        self.__exit__()
        lines = stdout.strip().splitlines()
        if code != 0 or not lines:
            state = "was killed after its timeout" if code is None else f"exited with {code}"
            raise RuntimeError(f"{' '.join(self.argv)} {state}; stderr:\n{stderr[-4000:]}\nstdout:\n{stdout[-2000:]}")
        report: dict[str, Any] = json.loads(lines[-1])
        report["stderr"] = stderr
        return report


def _options(options: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        else:
            out += [flag, str(value)]
    return out


@dataclass(frozen=True)
class ClientProgram:
    """One built client program: `command` runs it, `env` is added to the test's environment."""

    family: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def start(self, mode: str, *args: Any, conf: Mapping[str, Any] | None = None, timeout: float,
              **options: Any) -> Running:
        argv = [*self.command, mode, *map(str, args), *_options(options)]
        for key, value in (conf or {}).items():
            argv += ["--conf", f"{key}={value}"]
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()   # no pipe to fill up
        process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **self.env})
        return Running(argv, process, timeout, out, err)

    def start_produce(self, bootstrap: str, topic: str, client_id: str, seconds: float, *,
                      conf: Mapping[str, Any] | None = None, **options: Any) -> Running:
        """`produce` under way; options as the contract names them (record_bytes=1000, acks="all",
        max_records=N, idempotent=True, ...)."""
        return self.start("produce", bootstrap, topic, client_id, seconds, conf=conf,
                          timeout=seconds + DRAIN_SECONDS + EXIT_SLACK_SECONDS, **options)

    def produce(self, bootstrap: str, topic: str, client_id: str, seconds: float, *,
                conf: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
        with self.start_produce(bootstrap, topic, client_id, seconds, conf=conf, **options) as running:
            return running.result()

    def consume(self, bootstrap: str, topic: str, client_id: str, group: str, count: int, timeout: float, *,
                conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        with self.start("consume", bootstrap, topic, client_id, group, count, timeout, conf=conf,
                        timeout=timeout + EXIT_SLACK_SECONDS) as running:
            return running.result()


if __name__ == "__main__":
    # `.ci/run` (from tests/: python -m helpers.client_programs): build every program before the
    # tests, so a registry that refuses shows there, once, and no test pays a first build.
    import time

    from helpers import go_clients, node_clients

    began = time.monotonic()
    for family, binary in go_clients.build_all().items():
        print(f"{family}: {binary}")
    print(f"kafkajs: {node_clients.build() / 'client.js'}")
    print(f"client programs ready in {time.monotonic() - began:.1f}s")
