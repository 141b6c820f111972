"""`kqp compile` (proxy/tools/hot_path.py): the request path compiled by mypyc runs the pure tiers'
tests as the Python modules do, a source changed since compiling stops kqp from starting, and
`--remove` brings the Python modules back. An install that does not compile leaves the Python
modules and a record of why; the suite's own editable install runs the Python modules
(`test_install_build.py` installs compiled).

The compiled copy is made once (about 15 s) under a temporary folder and used through PYTHONPATH,
so the checkout every other test imports is never touched.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.kqp_process import kqp_command
from helpers.net import free_port

from kqp.proxy.tools import hot_path

TESTS = Path(__file__).resolve().parents[1]
# Where the compiled modules' behaviour is pinned: the pure tiers, and the asyncio edge on its fake loop.
PURE_TIERS = ("quotas", "protocol", "connection", "proxy/test_edge.py")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compiled")
    written = hot_path.compile_hot_path(root)
    assert {p.name.split(".")[0] for p in written} >= {m.rsplit(".", 1)[1] for m in hot_path.HOT_PATH}
    return root


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


def _file_of(root: Path, module: str) -> str:
    done = subprocess.run([sys.executable, "-c", f"import {module} as m; print(m.__file__)"], env=_env(root),
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.mark.timeout(900)
def test_the_compiled_request_path_passes_the_pure_tiers(compiled: Path) -> None:
    for module in hot_path.HOT_PATH:
        assert _file_of(compiled, module).endswith(".so"), f"{module} is not the compiled one"
    assert hot_path.state(compiled).compiled == hot_path.HOT_PATH and not hot_path.state(compiled).stale
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0",
                           *(str(TESTS / tier) for tier in PURE_TIERS)],
                          cwd=TESTS.parent, env=_env(compiled), capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_a_source_changed_since_compiling_stops_kqp_and_remove_brings_python_back(compiled: Path,
                                                                                 tmp_path: Path) -> None:
    compiled = Path(shutil.copytree(compiled, tmp_path / "copy"))   # changed here, the fixture's stays as built
    config = tmp_path / "kqp.yaml"
    config.write_text(yaml.safe_dump({"listen": f"127.0.0.1:{free_port()}", "broker_port_base": 0,
                                      "upstream": {"bootstrap_servers": ["127.0.0.1:9092"]}}))

    def check_config() -> subprocess.CompletedProcess[str]:
        return subprocess.run(kqp_command("check-config", str(config)), env=_env(compiled), capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    assert check_config().returncode == 0
    source = compiled / "kqp" / "quotas" / "rates" / "sensor.py"
    source.write_text(source.read_text() + "\n# changed after compiling\n")
    assert hot_path.state(compiled).stale == ("kqp.quotas.rates.sensor",)
    refused = check_config()
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert "kqp.quotas.rates.sensor" in line and "kqp compile" in line

    gone = hot_path.remove(compiled)
    assert len(gone) == len(hot_path.HOT_PATH) + 2   # the modules, the group's library, the manifest
    assert hot_path.state(compiled).compiled == () and hot_path.refusal(compiled) is None
    assert _file_of(compiled, "kqp.quotas.rates.sensor").endswith("rates/sensor.py")
    assert check_config().returncode == 0


def test_without_a_c_compiler_compile_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hot_path.shutil, "which", lambda _name: None)
    args = argparse.Namespace(check=False, remove=False, into=tmp_path)   # never into the checkout under test
    assert hot_path.run(args) == 2
    assert "no C compiler" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_install_that_does_not_compile_leaves_the_python_modules_and_says_why(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build = tmp_path / "build"   # laid out as setup.py's build folder: kqp/<package>
    for name in hot_path.PACKAGES:
        shutil.copytree(importlib.import_module(f"kqp.{name}").__path__[0], build / "kqp" / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", hot_path.MANIFEST))
    earlier = build / "kqp" / "protocol" / ("frames" + importlib.machinery.EXTENSION_SUFFIXES[0])
    earlier.write_bytes(b"left by an earlier build in the same folder")
    # ... and one of a module an earlier list compiled and this one does not
    retired = build / "kqp" / "proxy" / "runtime" / ("edge" + importlib.machinery.EXTENSION_SUFFIXES[0])
    retired.write_bytes(b"compiled by an earlier list")
    monkeypatch.setenv(hot_path.OPT_OUT, "0")
    assert "KQP_COMPILE=0" in hot_path.build_at_install(build)
    assert not earlier.exists() and not retired.exists()
    found = hot_path.describe(build)
    assert (found.request_path, found.reason) == ("python", "KQP_COMPILE=0")
    assert found.line.startswith("Python: not compiled at install: KQP_COMPILE=0")
    assert hot_path.refusal(build) is None


def test_the_suite_runs_the_python_modules_of_its_editable_install() -> None:
    found = hot_path.describe()
    assert (found.request_path, found.reason) == ("python", "editable install"), (
        f"{found.line}: the suite would not test the Python modules; `kqp compile --remove` in the checkout")
