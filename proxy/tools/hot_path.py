"""The request path compiled to C by mypyc (at `pip install`, or by `kqp compile`), the Python modules the fallback.

Every request goes through a few modules: the connection core, framing and headers, the Produce and
Fetch handlers, the record counts and, where a quota applies, the sensors, their rates, the manager,
the core's charging and throttling. mypyc compiles them as they are, into extension modules beside
their sources, which Python imports before a source module of the same name. The same tests hold for
both (`tests/proxy/test_kqp_compile.py` runs the pure tiers on a compiled copy). setup.py compiles at
install (`build_at_install`) and, where it cannot, installs the Python modules with a record of why.
The sources are copied into a temporary tree laid out as the `kqp` namespace (the folders map onto
`kqp.*` only when installed), compiled there as one group, and the extension modules copied back. A
manifest beside them keeps each source's hash: a module compiled from an older source would run the
old code, so `kqp run` and `kqp check-config` refuse to start on one. Standard library only: setup.py
loads this file, kqp not being importable while it is built.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlparse

__all__ = ["HOT_PATH", "BuildInfo", "CompileError", "State", "add_parser", "build_at_install", "compile_hot_path",
           "describe", "remove", "run", "state"]

# The modules compiled: what each request and response runs through, quotas first
# (`tests/connection/bench_core.py` times them), and the varints every Fetch v16+ response's walk to its
# tag section reads. Left out: `plans` (its dataclasses' annotations do not resolve when compiled),
# `protocol.parts` (tests count its copies by patching the class: a native class calls its own `copy`
# past the patch; compiled too, a response's walk took 12.7 -> 8.5 us, which `kqp bench` did not see);
# `proxy.runtime.edge`: a native class extending asyncio's protocols crashed on a weak reference (mypyc
# 2.4), and compiled as non-native classes it ran no cheaper per connection (`kqp bench` churn).
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
    "kqp.protocol.varints",
)
GROUP = "kqp.quotas.hot_path"       # mypyc's shared library for the group: `<GROUP>__mypyc`
MANIFEST = "hot_path.json"          # in kqp.quotas's folder: what was compiled, from which sources
PACKAGES = ("proxy", "protocol", "quotas", "config")   # kqp.<name>: what the stage copies
BUILD_SECONDS = 900
EXIT_USAGE = 2
OPT_OUT = "KQP_COMPILE"             # `KQP_COMPILE=0 pip install .`: the Python modules only
DISTRIBUTION = "kafka-quota-proxy"
SUMMARY_CHARS = 160                 # of a tool's last line, in the record of a failed install build
BY_INSTALL, BY_HAND = "install", "kqp compile"   # who compiled: the manifest's `built_by`
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
    and what to do, `reason` in a few words (kqp_build_info's label)."""

    def __init__(self, message: str, usage: bool = False, reason: str = "mypyc failed") -> None:
        super().__init__(message)
        self.usage = usage
        self.reason = reason

    def summary(self, width: int = SUMMARY_CHARS) -> str:
        """One line: the message's first clause and, where it carries a tool's output, its last line, cut."""
        lines = str(self).splitlines() or [self.reason]
        last = lines[-1].strip() if len(lines) > 1 else ""
        return lines[0].split(";")[0].rstrip(":") + (f": {last[:width]}{'...' if len(last) > width else ''}"
                                                     if last else "")


@dataclass(frozen=True)
class State:
    """What a kqp installation runs of the request path: compiled modules, and those whose source changed
    since they were compiled (`stale`: kqp refuses to start on them)."""

    compiled: tuple[str, ...]
    stale: tuple[str, ...]
    where: Path | None   # the manifest
    built_by: str = ""   # BY_INSTALL or BY_HAND
    fallback: str = ""   # an install that could not compile: why, in a few words
    detail: str = ""     # and in a line


class BuildInfo(NamedTuple):
    """What runs, for kqp's start line and kqp_build_info: `request_path` compiled, python or unknown."""

    request_path: str
    reason: str
    line: str


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
        record = json.loads(manifest.read_text())
        sources = dict(record["sources"])
        built_by, fallback, detail = (str(record.get(k, "")) for k in ("built_by", "fallback", "detail"))
    except FileNotFoundError:
        return State((), (), None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CompileError(f"{manifest}: unreadable ({exc}); `kqp compile --remove` clears it") from exc
    compiled = tuple(m for m in sources if _extension(m, dirs).exists())
    stale = tuple(m for m in compiled
                  if not _path_of(m, dirs).exists() or _digest(_path_of(m, dirs)) != sources[m])
    return State(compiled, stale, manifest, built_by or BY_HAND, fallback, detail)


def refusal(root: Path | None = None) -> str | None:
    """Why kqp must not start on this installation's compiled modules, or None."""
    try:
        found = state(root)
    except CompileError as exc:
        return str(exc)
    if not found.stale:
        return None
    names = ", ".join(found.stale)
    return (f"request path: compiled modules older than their sources: {names}; run `kqp compile` again, or "
            f"`kqp compile --remove` to run the Python modules")


def _editable(dirs: dict[str, Path]) -> bool:
    """Whether the sources run are an editable install's checkout (pip's direct_url.json says so;
    a checkout's own egg-info, found first from its folder, has none)."""
    for found in importlib.metadata.distributions(name=DISTRIBUTION):
        try:
            origin = json.loads(found.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if isinstance(origin, dict) and origin.get("dir_info", {}).get("editable"):
            checkout = Path(unquote(urlparse(str(origin.get("url", ""))).path)).resolve()
            return dirs["quotas"].resolve().is_relative_to(checkout)
    return False


def describe(root: Path | None = None) -> BuildInfo:
    """Whether the request path runs compiled or as Python, and why (a stale build refuses to start
    first: `refusal`)."""
    try:
        found = state(root)
    except CompileError as exc:
        return BuildInfo("unknown", "unreadable record", str(exc))   # kqp refuses to start on it
    if found.compiled:
        how = "at install" if found.built_by == BY_INSTALL else "by `kqp compile`"
        return BuildInfo("compiled", found.built_by, f"compiled by mypyc {how} ({len(found.compiled)} modules)")
    if found.fallback:
        return BuildInfo("python", found.fallback, f"Python: not compiled at install: {found.detail} "
                                                   "(`kqp compile` compiles it, or says why not in full)")
    if _editable(_package_dirs(root)):
        return BuildInfo("python", "editable install", "Python: an editable install is not compiled at install "
                                                       "(`kqp compile` compiles its checkout)")
    return BuildInfo("python", "not compiled", "Python: no build record beside the sources (a checkout, or after "
                                               "`kqp compile --remove`); `kqp compile` compiles them")


def _require_tools() -> None:
    if importlib.util.find_spec("mypyc") is None:
        raise CompileError("mypyc is not installed: pip install 'kafka-quota-proxy[compile]' (it comes with mypy)",
                           usage=True, reason="no mypyc")
    cc = os.environ.get("CC", "").split()[:1]   # what setuptools compiles with, where set
    if not (shutil.which(cc[0]) if cc else shutil.which("cc") or shutil.which("gcc")):
        named = f"CC={cc[0]}" if cc else "cc or gcc"
        raise CompileError(f"no C compiler ({named}) on PATH: install one (Debian: apt-get install gcc libc6-dev)",
                           usage=True, reason="no C compiler")


def compile_hot_path(into: Path | None = None, modules: tuple[str, ...] = HOT_PATH, *, sources: Path | None = None,
                     built_by: str = BY_HAND) -> list[Path]:
    """Compile `modules` of this installation's sources (or those under `sources`, laid out as
    `kqp/<package>`); their extension modules go next to them, or, with another `into`, into a
    whole copy of the kqp packages made there (run it with PYTHONPATH=`into`). Returns the files written."""
    _require_tools()
    here = _package_dirs(sources)
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
        if into is not None and into != sources:   # the whole staged tree, the built modules with it
            target = _package_dirs(into)
            for name, source in staged.items():
                shutil.copytree(source, target[name], dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target = here
            for module, path in zip(names, built, strict=True):
                shutil.copy2(path, _extension(module, target))
        written = [_extension(m, target) for m in names]
        manifest = _record(target, {"group": GROUP, "built_by": built_by,
                                    "sources": {m: _digest(_path_of(m, target)) for m in modules}})
        return [*written, manifest]


def _record(dirs: dict[str, Path], fields: dict[str, object]) -> Path:
    manifest = dirs["quotas"] / MANIFEST
    manifest.write_text(json.dumps({"python": sys.version.split()[0], **fields}, indent=1))
    return manifest


def build_at_install(root: Path) -> str:
    """Compile the request path in a build's tree (`root`/kqp/<package>, setup.py's build_lib) and
    say what was done. Never raises: where compiling fails the Python modules are installed, with a
    record of why that `describe` reads (`KQP_COMPILE=0` in the environment skips compiling)."""
    remove(root)   # a build folder reused from an earlier build must not ship its modules
    try:
        if os.environ.get(OPT_OUT, "").strip() == "0":
            raise CompileError(f"{OPT_OUT}=0 in the install's environment", reason=f"{OPT_OUT}=0")
        compile_hot_path(root, sources=root, built_by=BY_INSTALL)
    except Exception as exc:   # whatever breaks, the install goes on with the Python modules
        failed = exc if isinstance(exc, CompileError) else CompileError(f"{type(exc).__name__}: {exc}")
        remove(root)
        _record(_package_dirs(root), {"sources": {}, "fallback": failed.reason, "detail": failed.summary()})
        return f"request path left as Python: {failed.summary()}"
    return f"request path compiled by mypyc: {len(HOT_PATH)} modules"


def remove(root: Path | None = None) -> list[Path]:
    """Take the compiled modules away (the Python ones run again); the files removed."""
    dirs = _package_dirs(root)
    gone = []
    # Every extension module in kqp's folders, not only this list's: a build folder reused after the
    # list changed still holds the modules of the earlier one, which would be imported over the Python.
    for folder in dirs.values():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            for path in sorted(folder.rglob(f"*{suffix}")):
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
                print(f"request path: {describe().line}")
                return 0
            print(f"request path: {describe().line} ({found.where}): {', '.join(found.compiled)}")
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
