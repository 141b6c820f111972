"""`kqp compile`: the request path compiled to C by mypyc, the Python modules staying the fallback.

Every request goes through a few modules: the connection core, framing and headers, the Produce and
Fetch handlers, the record counts and, where a quota applies, the sensors, their rates, the manager,
the core's charging and throttling. mypy checks them clean, so mypyc compiles them as they are, into
extension modules beside their sources. Python imports an extension module before a source module of the same name:
a compiled kqp runs them, a fresh install (or after `kqp compile --remove`) the Python ones. The
same tests hold for both (`tests/proxy/test_kqp_compile.py` runs the pure tiers on a compiled copy).

Compiling needs mypy (`pip install 'kafka-quota-proxy[compile]'`) and a C compiler. The sources are
copied into a temporary tree laid out as the `kqp` namespace (the folders map onto `kqp.*` only when
installed), compiled there as one group, and the extension modules copied back. A manifest beside
them keeps each source's hash: a module compiled from an older source would run the old code, so
`kqp run` and `kqp check-config` refuse to start on one.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOT_PATH", "CompileError", "State", "add_parser", "compile_hot_path", "remove", "run", "state"]

# The modules compiled: what each request and response runs through, quotas first
# (`tests/connection/bench_core.py` times them). Left out: `plans` (its dataclasses' annotations
# do not resolve when compiled) and `protocol.parts` (tests count its copies by patching the class).
HOT_PATH = (
    "kqp.quotas.rates.token_bucket",
    "kqp.quotas.rates.sampled_rate",
    "kqp.quotas.rates.sensor",
    "kqp.quotas.manager",
    "kqp.proxy.connection.core",
    "kqp.proxy.connection.charging",
    "kqp.proxy.connection.throttling",
    "kqp.proxy.connection.mute",
    "kqp.proxy.connection.authentication",
    "kqp.proxy.connection.awaiting",
    "kqp.proxy.connection.handlers.produce",
    "kqp.proxy.connection.handlers.fetch",
    "kqp.protocol.records",
    "kqp.protocol.frames",
    "kqp.protocol.headers",
)
GROUP = "kqp.quotas.hot_path"       # mypyc's shared library for the group: `<GROUP>__mypyc`
MANIFEST = "hot_path.json"          # in kqp.quotas's folder: what was compiled, from which sources
PACKAGES = ("proxy", "protocol", "quotas", "config")   # kqp.<name>: what the stage copies
BUILD_SECONDS = 900
EXIT_USAGE = 2
_SETUP = """
import sys
from mypyc.build import mypycify
from setuptools import setup
setup(name="kqp-hot-path", script_args=["build_ext", "--inplace"],
      ext_modules=mypycify(["--explicit-package-bases", "--ignore-missing-imports", "--follow-imports=silent",
                            *sys.argv[2:]],
                           group_name=sys.argv[1]))
"""


class CompileError(RuntimeError):
    """Compiling is not possible here (`usage`: a tool is missing), or failed: the message says why
    and what to do."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class State:
    """What a kqp installation runs of the request path: compiled modules, and those whose source changed
    since they were compiled (`stale`: kqp refuses to start on them)."""

    compiled: tuple[str, ...]
    stale: tuple[str, ...]
    where: Path | None   # the manifest


def _package_dirs(root: Path | None = None) -> dict[str, Path]:
    """kqp.<name> -> its folder: under `root`/kqp when given, else where this installation has it."""
    if root is not None:
        return {name: root / "kqp" / name for name in PACKAGES}
    out = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(f"kqp.{name}")
        if spec is None or not spec.submodule_search_locations:
            raise CompileError(f"kqp.{name} is not importable here")
        out[name] = Path(next(iter(spec.submodule_search_locations)))
    return out


def _path_of(module: str, dirs: dict[str, Path], suffix: str = ".py") -> Path:
    _kqp, package, *rest = module.split(".")
    return dirs[package].joinpath(*rest).with_suffix(suffix) if rest else dirs[package] / f"__init__{suffix}"


def _extension(module: str, dirs: dict[str, Path]) -> Path:
    return _path_of(module, dirs, importlib.machinery.EXTENSION_SUFFIXES[0])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state(root: Path | None = None) -> State:
    """The installation's compiled modules (or the copy under `root`), read from its manifest."""
    dirs = _package_dirs(root)
    manifest = dirs["quotas"] / MANIFEST
    try:
        sources = json.loads(manifest.read_text())["sources"]
    except FileNotFoundError:
        return State((), (), None)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompileError(f"{manifest}: unreadable ({exc}); `kqp compile --remove` clears it") from exc
    compiled = tuple(m for m in sources if _extension(m, dirs).exists())
    stale = tuple(m for m in compiled
                  if not _path_of(m, dirs).exists() or _digest(_path_of(m, dirs)) != sources[m])
    return State(compiled, stale, manifest)


def refusal(root: Path | None = None) -> str | None:
    """Why kqp must not start on this installation's compiled modules, or None."""
    try:
        found = state(root)
    except CompileError as exc:
        return str(exc)
    if not found.stale:
        return None
    names = ", ".join(found.stale)
    return (f"compiled modules older than their sources: {names}; run `kqp compile` again, or "
            f"`kqp compile --remove` to run the Python modules")


def _require_tools() -> None:
    if importlib.util.find_spec("mypyc") is None:
        raise CompileError("mypyc is not installed: pip install 'kafka-quota-proxy[compile]' (it comes with mypy)",
                           usage=True)
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        raise CompileError("no C compiler (cc or gcc) on PATH: install one (Debian: apt-get install gcc libc6-dev)",
                           usage=True)


def compile_hot_path(into: Path | None = None, modules: tuple[str, ...] = HOT_PATH) -> list[Path]:
    """Compile `modules`; their extension modules go next to this installation's sources, or, with
    `into`, into a whole copy of the kqp packages made there (run it with PYTHONPATH=`into`).
    Returns the files written."""
    _require_tools()
    here = _package_dirs()
    with tempfile.TemporaryDirectory(prefix="kqp-compile-") as tmp:
        stage = Path(tmp)
        staged = _package_dirs(stage)
        for name, source in here.items():
            shutil.copytree(source, staged[name], ignore=shutil.ignore_patterns("__pycache__", "*.so", MANIFEST))
        files = [str(_path_of(m, staged).relative_to(stage)) for m in modules]
        try:
            done = subprocess.run([sys.executable, "-c", _SETUP, GROUP, *files], cwd=stage, capture_output=True,
                                  text=True, timeout=BUILD_SECONDS)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"mypyc did not finish within {BUILD_SECONDS} s") from exc
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise CompileError(f"mypyc failed (exit {done.returncode}); the Python modules stay in use:\n{tail}")
        built = [_extension(m, staged) for m in (*modules, GROUP + "__mypyc")]
        missing = [str(p) for p in built if not p.exists()]
        if missing:
            raise CompileError(f"mypyc reported success but did not build {', '.join(missing)}")
        names = (*modules, GROUP + "__mypyc")
        if into is not None:   # the whole staged tree, the built modules with it
            target = _package_dirs(into)
            for name, source in staged.items():
                shutil.copytree(source, target[name], dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target = here
            for module, path in zip(names, built, strict=True):
                shutil.copy2(path, _extension(module, target))
        written = [_extension(m, target) for m in names]
        manifest = target["quotas"] / MANIFEST
        manifest.write_text(json.dumps({"group": GROUP, "python": sys.version.split()[0],
                                        "sources": {m: _digest(_path_of(m, target)) for m in modules}}, indent=1))
        return [*written, manifest]


def remove(root: Path | None = None) -> list[Path]:
    """Take the compiled modules away (the Python ones run again); the files removed."""
    dirs = _package_dirs(root)
    gone = []
    for module in (*HOT_PATH, GROUP + "__mypyc"):
        path = _extension(module, dirs)
        if path.exists():
            path.unlink()
            gone.append(path)
    manifest = dirs["quotas"] / MANIFEST
    if manifest.exists():
        manifest.unlink()
        gone.append(manifest)
    return gone


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("compile", help="compile the request and quota path with mypyc (needs the [compile] extra "
                                       "and a C compiler); the Python modules stay the fallback")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--into", type=Path, metavar="DIR",
                      help="write a compiled copy of the kqp packages under DIR instead (run it with PYTHONPATH=DIR)")
    what.add_argument("--remove", action="store_true", help="remove the compiled modules: run the Python ones")
    what.add_argument("--check", action="store_true", help="say what is compiled, and whether it is current")


def run(args: argparse.Namespace) -> int:
    try:
        if args.check:
            found = state()
            if not found.compiled:
                print("the request path runs as Python (nothing compiled)")
                return 0
            print(f"compiled ({found.where}): {', '.join(found.compiled)}")
            if found.stale:
                print(refusal(), file=sys.stderr)
                return 1
            return 0
        if args.remove:
            gone = remove()
            print(f"removed {len(gone)} file(s): the request path runs as Python" if gone else "nothing was compiled")
            return 0
        written = compile_hot_path(args.into)
    except CompileError as exc:
        print(f"kqp compile: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else 1
    print(f"compiled {len(HOT_PATH)} modules with mypyc: {written[-1].parent}" if args.into is None
          else f"compiled copy under {args.into}: run it with PYTHONPATH={args.into}")
    return 0
