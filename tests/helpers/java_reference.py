"""Java itself as the reference for what Kafka computes from a client certificate.

A Kafka broker names a TLS client by `X500Principal.getName()` and maps that string with
`java.util.regex`; kqp reimplements both in Python. Where a JDK is installed (these machines have
Java 17 for PySpark), `JavaReference` compiles `java/X500Check.java` once and asks Java for the
answers, so the tests compare kqp with the real thing rather than with expectations written by
hand. Without `javac` the comparison tests are skipped; the hand-written cases still run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("java") / "X500Check.java"


class JavaReference:
    def __init__(self, workdir: Path) -> None:
        javac, java = shutil.which("javac"), shutil.which("java")
        if javac is None or java is None:
            pytest.skip("no JDK (javac) installed: the comparison with Java is skipped")
        subprocess.run([javac, "-d", str(workdir), str(SOURCE)], check=True, capture_output=True, timeout=120)
        self._command = [java, "-cp", str(workdir), "X500Check"]

    def _ask(self, requests: Sequence[str]) -> list[str | None]:
        done = subprocess.run(self._command, input="\n".join(requests) + "\n", capture_output=True, text=True,
                              timeout=120, check=True)
        answers = done.stdout.splitlines()
        assert len(answers) == len(requests), done.stderr
        return [bytes.fromhex(a[3:]).decode() if a.startswith("OK ") else None if a == "NOMATCH" else a
                for a in answers]

    def names(self, ders: Sequence[bytes]) -> list[str | None]:
        """`new X500Principal(der).getName()` for each DER-encoded Name."""
        return self._ask([f"N {der.hex()}" for der in ders])

    def replace_all(self, cases: Sequence[tuple[str, str, str]]) -> list[str | None]:
        """For each (regex, replacement, dn): `dn.replaceAll(regex, replacement)` when the regex
        matches the whole dn (Kafka's rule), None when it does not."""
        return self._ask(["R " + "\t".join(part.encode().hex() for part in case) for case in cases])
