"""What a module imports, read from its source: for tests that keep a layer's dependencies honest."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of every module `path` (a module of `package`) imports, relative imports resolved."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.add(node.module)
    return names


def imported_roots(path: Path) -> set[str]:
    """The top-level packages `path` imports absolutely (``time``, ``asyncio``, ``kqp``...)."""
    return {name.split(".")[0] for name in imported_modules(path, "_") if not name.startswith("_.")}
