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


def scanned(root: Path, package: str) -> dict[str, list[str]]:
    """Each module below `root` (subpackages too) with what it imports that it must not."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        inner = path.parent.relative_to(root).parts
        found[str(path.relative_to(root))] = offences(path, ".".join((package, *inner)))
    return found


def test_the_package_has_the_modules_we_scan() -> None:
    names = set(scanned(CORE_DIR, "kqp.proxy.connection"))
    assert {"core.py", "events.py", "plans.py", "mute.py", "handlers/produce.py", "handlers/registry.py"} <= names


def test_no_core_module_imports_io_or_the_runtime() -> None:
    assert {name: bad for name, bad in scanned(CORE_DIR, "kqp.proxy.connection").items() if bad} == {}


def test_no_policy_imports_io_or_the_runtime() -> None:
    assert {"mutation_gate.py", "quota_admin.py", "topic_metadata.py"} <= {p.name for p in POLICIES_DIR.glob("*.py")}
    assert {name: bad for name, bad in scanned(POLICIES_DIR, "kqp.proxy.policies").items() if bad} == {}


def test_the_scan_would_catch_an_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom asyncio import sleep\nfrom kqp.proxy.runtime.edge import ClientEdge\n")
    assert offences(bad) == ["asyncio", "kqp.proxy.runtime.edge", "time"]
