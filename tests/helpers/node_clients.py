"""The kafkajs client program (tests/clients/node/), installed once with `npm ci` and run with node.

`program()` returns a `ClientProgram` for "kafkajs": client.js, package.json and package-lock.json
are copied into the cache of `client_programs.built` (keyed by their hash and node's major
version) and `npm ci` installs the locked kafkajs beside them, through npm's own cache, so only a
machine's first install reaches the registry.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from .client_programs import CACHE, SOURCES, ClientProgram, ToolMissing, built, digest, run_tool, unavailable

PACKAGE = SOURCES / "node"
FILES = ("client.js", "package.json", "package-lock.json")
INSTALL_TIMEOUT = 300.0
UNREACHABLE = ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "ECONNRESET")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"no `{name}` on PATH: install Node.js 20 and npm to run tests/clients/node")
    return found


@functools.cache
def node_major() -> str:
    done = run_tool([_tool("node"), "--version"], cwd=PACKAGE, env=os.environ, timeout=60, what="node --version")
    return done.stdout.strip().lstrip("v").split(".")[0]


def _install(folder: Path) -> None:
    for name in FILES:
        shutil.copy(PACKAGE / name, folder / name)
    env = dict(os.environ)
    if not env.get("HOME"):   # npm's default cache lives under $HOME
        env.setdefault("npm_config_cache", str(CACHE / "npm"))
    try:
        run_tool([_tool("npm"), "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=folder, env=env,
                 timeout=INSTALL_TIMEOUT, what="npm ci of tests/clients/node")
    except RuntimeError as exc:
        if any(marker in str(exc) for marker in UNREACHABLE) and not os.environ.get("CI"):
            raise ToolMissing(f"the npm registry is out of reach: {str(exc).splitlines()[-1]}") from exc
        raise


@functools.cache
def _folder() -> Path:
    return built("node", digest([PACKAGE / name for name in FILES], f"node {node_major()}"), _install)


def build() -> Path:
    """The installed program's folder, installed where missing (`python -m helpers.client_programs`)."""
    return _folder()


def program() -> ClientProgram:
    """The installed kafkajs program; skips (fails under CI=true) where node or npm is missing."""
    try:
        return ClientProgram("kafkajs", (_tool("node"), str(_folder() / "client.js")))
    except ToolMissing as exc:
        unavailable(str(exc))
