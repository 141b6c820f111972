"""The Go client programs: current Sarama and franz-go (tests/clients/go/), and Debian's old Sarama.

`program(family)` builds on first use and returns a `ClientProgram` for "sarama", "franz-go" or
"sarama-old". The module tests/clients/go/ (go.mod and go.sum committed) is built with the Go on
PATH or in /usr/local/go, GOFLAGS=-mod=mod, and the user's own module and build caches, so only a
machine's first build downloads and compiles the libraries; the binaries land in the cache of
`client_programs.built`, keyed by a hash of the sources and the Go version.

"sarama-old" is the same Sarama program built without modules (GO111MODULE=off) against Debian's
golang-github-shopify-sarama-dev (Sarama 1.22, /usr/share/gocode): it is copied into a GOPATH of
its own with its import path rewritten to github.com/Shopify/sarama, so the build needs nothing but
the Debian packages. cgo is off for every build: nothing here needs a C compiler (1.22's zstd
would, and is not used).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from .client_programs import CACHE, SOURCES, ClientProgram, ToolMissing, built, digest, run_tool, unavailable

MODULE = SOURCES / "go"
SARAMA_MAIN = MODULE / "sarama" / "main.go"
CONTRACT = MODULE / "contract" / "contract.go"
DEBIAN_GOPATH = Path("/usr/share/gocode")
DEBIAN_SARAMA = DEBIAN_GOPATH / "src" / "github.com" / "Shopify" / "sarama"
DEBIAN_PACKAGE = "golang-github-shopify-sarama-dev"
LOCAL_GO = Path("/usr/local/go/bin/go")   # where the project's machines have Go, maybe not on PATH
BUILD_TIMEOUT = 600.0
# The module's main packages and the family each binary is.
MAINS = {"sarama": "sarama", "franz-go": "franz"}
FAMILIES = (*MAINS, "sarama-old")
# What `go` prints when the module proxy is out of reach, as opposed to code that does not build.
UNREACHABLE = ("dial tcp", "no such host", "connection refused", "i/o timeout", "TLS handshake timeout")


def go() -> str:
    found = shutil.which("go") or (str(LOCAL_GO) if LOCAL_GO.exists() else None)
    if found is None:
        raise ToolMissing("no `go` on PATH or in /usr/local/go/bin: install Go 1.26 to build tests/clients/go")
    return found


def _env(**more: str) -> dict[str, str]:
    # GOTOOLCHAIN=local: a go.mod asking for a newer Go fails here rather than fetching a toolchain.
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", **more}
    if not env.get("HOME") and not env.get("GOCACHE"):   # Go's default caches live under $HOME
        env.update(GOCACHE=str(CACHE / "go-build"), GOMODCACHE=str(CACHE / "go-mod"))
    return env


@functools.cache
def go_version() -> str:
    return run_tool([go(), "env", "GOVERSION"], cwd=MODULE, env=_env(), timeout=60, what="go env").stdout.strip()


def _build_module(folder: Path) -> None:
    argv = [go(), "build", "-trimpath", "-o", str(folder) + os.sep, *(f"./{main}" for main in MAINS.values())]
    try:
        run_tool(argv, cwd=MODULE, env=_env(GOFLAGS="-mod=mod -buildvcs=false"), timeout=BUILD_TIMEOUT,
                 what="go build of tests/clients/go")
    except RuntimeError as exc:
        if any(marker in str(exc) for marker in UNREACHABLE) and not os.environ.get("CI"):
            raise ToolMissing(f"the Go module proxy is out of reach: {str(exc).splitlines()[-1]}") from exc
        raise


def debian_sarama_version() -> str:
    """Debian's Sarama package version without its Debian revision (1.22.1-1 -> 1.22.1)."""
    if not DEBIAN_SARAMA.is_dir():
        raise ToolMissing(f"no {DEBIAN_SARAMA}: apt-get install {DEBIAN_PACKAGE} (Sarama 1.22)")
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", DEBIAN_PACKAGE], capture_output=True, text=True,
                          check=False, timeout=30)
    return done.stdout.strip().rsplit("-", 1)[0] if done.returncode == 0 and done.stdout else "unknown"


def _build_old(folder: Path, version: str) -> None:
    gopath = folder / "gopath"
    main, contract = gopath / "src" / "kqpclients" / "saramaold", gopath / "src" / "kqpclients" / "contract"
    main.mkdir(parents=True)
    contract.mkdir(parents=True)
    source = SARAMA_MAIN.read_text()
    assert '"github.com/IBM/sarama"' in source, "the Sarama program no longer imports github.com/IBM/sarama"
    (main / "main.go").write_text(source.replace('"github.com/IBM/sarama"', '"github.com/Shopify/sarama"'))
    shutil.copy(CONTRACT, contract / "contract.go")
    flags = f"-X main.clientName=sarama-old -X main.libraryVersion={version}"
    run_tool([go(), "build", "-trimpath", "-ldflags", flags, "-o", str(folder / "sarama-old"), "kqpclients/saramaold"],
             cwd=main, timeout=BUILD_TIMEOUT, what="go build of the old Sarama program (GOPATH mode)",
             env=_env(GO111MODULE="off", GOFLAGS="-buildvcs=false", GOPATH=f"{gopath}{os.pathsep}{DEBIAN_GOPATH}"))
    shutil.rmtree(gopath)


@functools.cache
def _binary(family: str) -> Path:
    if family == "sarama-old":
        version = debian_sarama_version()
        key = digest([SARAMA_MAIN, CONTRACT], go_version(), version)
        return built("go-old", key, lambda folder: _build_old(folder, version)) / "sarama-old"
    sources = [p for p in MODULE.rglob("*") if p.is_file() and (p.suffix == ".go" or p.name in ("go.mod", "go.sum"))]
    return built("go", digest(sources, go_version()), _build_module) / MAINS[family]


def build_all() -> dict[str, Path]:
    """Every Go family's binary, built where missing (`python -m helpers.client_programs`)."""
    return {family: _binary(family) for family in FAMILIES}


def program(family: str) -> ClientProgram:
    """The built program of a Go client family; skips (fails under CI=true) where it cannot be built."""
    if family not in FAMILIES:
        raise ValueError(f"unknown Go client family {family!r}; expected one of {FAMILIES}")
    try:
        return ClientProgram(family, (str(_binary(family)),))
    except ToolMissing as exc:
        unavailable(str(exc))
