"""Java libraries for the tests, resolved from Maven Central into a folder of jars.

Each folder under tests/jvm/ holds a pom.xml that only lists dependencies; `jars(name)` runs Maven's
`dependency:copy-dependencies` on it once into `.cache/jvm/<name>-<hash of the pom>/` and returns that
folder. The hash makes an edited pom resolve afresh; the lock lets several pytest-xdist workers ask at
once. `.ci/run` resolves every pom before the tests start (`python tests/upstreams/jvm.py`), so a
registry that refuses shows there, once. `KQP_JVM_CACHE` moves the cache. Nothing resolved is committed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

POMS = Path(__file__).resolve().parents[1] / "jvm"
CACHE = Path(os.environ.get("KQP_JVM_CACHE") or Path(__file__).resolve().parents[2] / ".cache" / "jvm")
RESOLVE_TIMEOUT = 900.0


class JvmMissing(RuntimeError):
    """Java or Maven is not installed, or Maven could not resolve a pom."""


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise JvmMissing("no `java` on PATH: install a Java 17 runtime (Debian: openjdk-17-jre-headless)")
    return found


def javac() -> str:
    found = shutil.which("javac")
    if found is None:
        raise JvmMissing("no `javac` on PATH: install a JDK 17 (Debian: openjdk-17-jdk-headless)")
    return found


def names() -> list[str]:
    return sorted(p.parent.name for p in POMS.glob("*/pom.xml"))


def jars(name: str) -> Path:
    """The folder of jars that tests/jvm/<name>/pom.xml resolves to, resolving it the first time."""
    pom = POMS / name / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    folder = CACHE / f"{name}-{digest}"
    if (folder / ".complete").exists():
        return folder
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmMissing("no `mvn` on PATH: install Maven (Debian: maven) to resolve tests/jvm/*/pom.xml")
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another worker may be resolving the same pom
        if (folder / ".complete").exists():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={partial}"],
            capture_output=True, text=True, timeout=RESOLVE_TIMEOUT, check=False)
        if done.returncode != 0 or not list(partial.glob("*.jar")):
            raise JvmMissing(f"mvn could not resolve {pom} (exit {done.returncode}):\n"
                             f"{(done.stdout + done.stderr)[-3000:]}")
        (partial / ".complete").touch()
        partial.rename(folder)
    return folder


def classpath(name: str, *more: Path) -> str:
    """A `-cp` argument: the pom's jars, then `more` (compiled test classes)."""
    return os.pathsep.join([str(jars(name) / "*"), *map(str, more)])


if __name__ == "__main__":
    # `.ci/run`: resolve every pom (or those named) and print where each went.
    for wanted in sys.argv[1:] or names():
        print(f"{wanted}: {jars(wanted)}")
