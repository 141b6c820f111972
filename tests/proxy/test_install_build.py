"""`pip install .` compiles the request path (setup.py calling proxy/tools/hot_path.py), and where the
C compiler fails it installs the Python modules: kqp from each install says which runs in its start
line and in kqp_build_info, and forwards a Produce and a Fetch under a quota either way.

Each install goes into a virtualenv of its own, made here, that sees the test venv's packages through
a .pth line (setuptools and mypy to build with, kqp's dependencies to run): pip needs neither the
network nor build isolation. pip builds in the source tree, so the sources are copied first. One
build compiles (about 20 s of CPU on these 2 cores) and one stops at the C compiler (about 7 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from helpers.kqp_process import KqpProcess, kqp_config, kqp_env
from helpers.names import unique_topic
from helpers.observability import metrics_url, sample, scrape
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

from kqp.proxy.tools import hot_path

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "proxy", "protocol", "quotas", "config")
SKIP = shutil.ignore_patterns("__pycache__", "*.so", hot_path.MANIFEST)
INSTALL_SECONDS = 600
CLIENT_ID = "install-build"
QUOTAS = {"entities": [{"client_id": CLIENT_ID, "producer_byte_rate": 10_000_000, "consumer_byte_rate": 10_000_000}]}


def _install(tmp_path: Path, **env: str) -> Path:
    """`pip install <copy of the sources>` into a new virtualenv; its python."""
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=SKIP)
        else:
            shutil.copy2(REPO / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(site, "test-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-build-isolation", "--no-index", str(source)],
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env},
                          capture_output=True, text=True, timeout=INSTALL_SECONDS, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return python


def _run(tmp_path: Path, python: Path, upstream: Upstream) -> tuple[str, dict[str, str]]:
    """kqp from that install in front of `upstream`: its request path line and kqp_build_info's labels,
    after a Produce and a Fetch through it."""
    data = kqp_config(upstream, QUOTAS, metrics={"listen": "127.0.0.1:0"})
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.Popen([str(python), "-m", "kqp.proxy.tools.cli", "run", "--config", str(path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=kqp_env(), cwd=tmp_path)
    kqp = KqpProcess(proc, path, data)
    try:
        kqp.wait_ready(30)
        url = metrics_url(kqp)
        topic = unique_topic("install")
        ensure_topic(kqp.bootstrap, topic, 1, upstream_kind=upstream.kind)
        tally = Tally()
        with RawConnection(kqp.bootstrap, CLIENT_ID, tally) as boot:
            leader = boot.leader_address(topic)
        with RawConnection(leader, CLIENT_ID, tally) as conn:
            offset = conn.produce(topic, [b"x" * 100] * 5)
            assert conn.fetch(topic, offset)[0] == 5
        families = scrape(url)
        assert sample(families, "kqp_records_total", direction="produce", user="ANONYMOUS", client_id=CLIENT_ID) == 5
        [labels] = [dict(labels) for name, labels in families if name == "kqp_build_info"]
        line = kqp.wait_for_log("request path:")
    finally:
        kqp.stop()
    return line, labels


def test_pip_install_compiles_the_request_path(tmp_path: Path, mock_cluster: Upstream) -> None:
    python = _install(tmp_path)
    line, labels = _run(tmp_path, python, mock_cluster)
    assert f"request path: compiled by mypyc at install ({len(hot_path.HOT_PATH)} modules)" in line
    assert labels["request_path"] == "compiled" and labels["reason"] == "install"
    where = subprocess.run([str(python), "-c", "import kqp.proxy.connection.core as m; print(m.__file__)"],
                           check=True, capture_output=True, text=True, timeout=60).stdout
    assert where.strip().endswith(".so") and str(tmp_path / "venv") in where


def test_without_a_working_c_compiler_pip_install_falls_back_to_python(tmp_path: Path,
                                                                        mock_cluster: Upstream) -> None:
    python = _install(tmp_path, CC="/bin/false")
    line, labels = _run(tmp_path, python, mock_cluster)
    assert "request path: Python: not compiled at install: mypyc failed" in line and "/bin/false" in line
    assert labels["request_path"] == "python" and labels["reason"] == "mypyc failed"
