"""The connection core and the process-wide policies it consults are sans-io: no module of
kqp.proxy.connection or kqp.proxy.policies imports a clock, an event loop or a socket, nor any part
of kqp that does (the runtime, observability, the tools)."""

from __future__ import annotations

from pathlib import Path

from helpers.imports import imported_modules

import kqp.proxy.connection
import kqp.proxy.policies

FORBIDDEN_ROOTS = {"time", "asyncio", "socket", "selectors", "uvloop", "ssl"}
FORBIDDEN_KQP = ("kqp.proxy.runtime", "kqp.proxy.observability", "kqp.proxy.tools", "kqp.proxy.bench")
CORE_DIR = Path(kqp.proxy.connection.__file__).parent
POLICIES_DIR = Path(kqp.proxy.policies.__file__).parent


def offences(path: Path, package: str = "kqp.proxy.connection") -> list[str]:
    names = imported_modules(path, package)
    return sorted(n for n in names if n.split(".")[0] in FORBIDDEN_ROOTS or n.startswith(FORBIDDEN_KQP))


def test_the_package_has_the_modules_we_scan() -> None:
    assert {"core.py", "events.py", "requests.py", "responses.py", "mute.py"} <= {p.name for p in CORE_DIR.glob("*.py")}


def test_no_core_module_imports_io_or_the_runtime() -> None:
    assert {p.name: offences(p) for p in sorted(CORE_DIR.glob("*.py")) if offences(p)} == {}


def test_no_policy_imports_io_or_the_runtime() -> None:
    assert {"mutation_gate.py", "quota_admin.py", "topic_metadata.py"} <= {p.name for p in POLICIES_DIR.glob("*.py")}
    found = {p.name: offences(p, "kqp.proxy.policies") for p in sorted(POLICIES_DIR.glob("*.py"))}
    assert {name: names for name, names in found.items() if names} == {}


def test_the_scan_would_catch_an_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom asyncio import sleep\nfrom kqp.proxy.runtime.edge import ClientEdge\n")
    assert offences(bad) == ["asyncio", "kqp.proxy.runtime.edge", "time"]
