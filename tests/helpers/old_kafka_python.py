"""kafka-python 2.x in a virtual environment of its own, and its client script run as a subprocess.

kafka-python 2.x is the client an old deployment still runs, and pinned to `api_version=(0, 11)`
it speaks Kafka 0.11's request versions. Its import name `kafka` is kafka-python 3's too (kqp
and these tests use 3), so it lives in its own virtual environment, built once per test session
from the package index, and runs `kafka_python2_client.py` there. Building needs the index; when
pip cannot reach it the caller skips, with that reason, rather than failing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CLIENT_SCRIPT = Path(__file__).with_name("kafka_python2_client.py")
REQUIREMENT = "kafka-python<3"
PIP_TIMEOUT_SECONDS = 240.0
# What pip prints when the index is out of reach (DNS, refused, proxy, timeouts), as opposed
# to a package that does not install.
UNREACHABLE = ("NewConnectionError", "ConnectTimeoutError", "Max retries exceeded", "ProxyError",
               "Temporary failure in name resolution", "Network is unreachable", "(from versions: none)",
               "ReadTimeoutError", "SSLError")


class IndexUnreachable(RuntimeError):
    """pip could not reach the package index: the caller skips with this message."""


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          check=False, env=_clean_env())


def _clean_env() -> dict[str, str]:
    """The test process's environment without what would point an interpreter at its packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def build(directory: Path) -> Path:
    """A virtual environment in `directory` holding kafka-python 2.x; its interpreter's path.

    The environment is made without pip (ensurepip takes ~15 s) and filled by the test
    interpreter's pip through `--python`, falling back to the environment's own pip where the
    outer one cannot. Raises IndexUnreachable when the index cannot be reached.
    """
    python = directory / "bin" / "python"
    outer_pip = _run([sys.executable, "-m", "pip", "--version"], 60).returncode == 0
    venv = [sys.executable, "-m", "venv", *(["--without-pip"] if outer_pip else []), str(directory)]
    made = _run(venv, 120)
    if made.returncode != 0:
        raise RuntimeError(f"python -m venv failed:\n{made.stdout}\n{made.stderr}")
    pip = [sys.executable, "-m", "pip", "--python", str(python)] if outer_pip else [str(python), "-m", "pip"]
    installed = _run([*pip, "install", "--quiet", "--timeout", "20", "--retries", "1", REQUIREMENT],
                     PIP_TIMEOUT_SECONDS)
    if installed.returncode != 0:
        output = installed.stdout + installed.stderr
        if any(marker in output for marker in UNREACHABLE):
            raise IndexUnreachable(f"pip could not reach the package index for {REQUIREMENT!r}: "
                                   f"{output.strip().splitlines()[-1]}")
        raise RuntimeError(f"pip install {REQUIREMENT!r} failed:\n{output[-3000:]}")
    version = _run([str(python), "-I", "-c", "import kafka; print(kafka.__version__)"], 60)
    assert version.returncode == 0 and version.stdout.startswith("2."), \
        f"the environment does not hold kafka-python 2.x: {version.stdout}{version.stderr}"
    return python


def run_client(python: Path, mode: str, bootstrap: str, topic: str, client_id: str, count: int, *,
               api_version: tuple[int, ...] = (0, 11), timeout: float = 120.0) -> dict[str, Any]:
    """Run the client script (`produce` or `consume` `count` messages) pinned to `api_version`; its
    JSON report.

    `-I` keeps the interpreter to its own environment: nothing of the test process's
    `sys.path` (kafka-python 3, kqp) can leak in.
    """
    argv = [str(python), "-I", str(CLIENT_SCRIPT), mode, bootstrap, topic, client_id, str(count),
            ".".join(map(str, api_version))]
    done = _run(argv, timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"kafka-python 2.x {mode} exited with {done.returncode}; stderr:\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(lines[-1])
    report["stderr"] = done.stderr
    return report
