"""kqp.protocol is sans-io: no module in protocol/ imports asyncio, socket, time or other I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROTOCOL_DIR = Path(__file__).resolve().parents[2] / "protocol"
FORBIDDEN = {"asyncio", "socket", "time", "selectors", "ssl", "threading", "uvloop", "subprocess"}
MODULES = sorted(PROTOCOL_DIR.glob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("__import__")  # dynamic imports would dodge this check
    return roots


def test_the_check_sees_the_modules() -> None:
    names = {p.stem for p in MODULES}
    assert {"frames", "headers", "apis", "throttle_field", "addresses"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_is_sans_io(path: Path) -> None:
    bad = imported_roots(path) & (FORBIDDEN | {"__import__"})
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_check_would_catch_an_offender(tmp_path: Path) -> None:
    offender = tmp_path / "x.py"
    offender.write_text("import os\nfrom time import monotonic\nimport asyncio.events\n")
    assert imported_roots(offender) & FORBIDDEN == {"time", "asyncio"}
