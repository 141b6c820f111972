"""Every repository path the Markdown files name exists, and every relative link lands.

The docs point newcomers at files (`proxy/runtime/edge.py`, `tests/e2e/test_limits.py`,
`deploy/k8s/sasl/`); a rename that forgets them leaves a reader at a dead end. This test reads
every ``*.md`` of the repository (outside ``.git``, ``.venv`` and other git-ignored folders) and
checks what they name. The rule for what counts as a path:

* **Link targets** ``[text](target)`` and ``![alt](target)``: every target without a scheme
  (``https:``, ``mailto:``) is a path relative to the Markdown file, as a Markdown renderer reads
  it. A ``#fragment`` must name a heading of the target file (GitHub's anchors: lower case,
  punctuation dropped, spaces to ``-``); ``#fragment`` alone names one of the file's own headings.
* **Inline code spans** outside fenced blocks, when the whole span looks like a path: only the
  characters ``A-Z a-z 0-9 _ . - / *`` (plus an optional ``::test_name`` suffix), at least one
  ``/``, not starting with ``/`` (``/etc/kqp/...`` and ``/users/alice`` are paths in a container or
  quota entities, not in the repository), and one of: its first segment is a top-level entry of
  the repository (``deploy/...``, ``tests/...``, ``.ci/run``), or it ends with ``/`` (a folder,
  ``sidecar/``), or its last segment has a file extension (``kqp/kqp.yaml``). So URLs
  (``://``), import names (``kqp.proxy.runtime``), config keys (``quotas.scope``), metric names,
  ``host:port``, ``RULE:...`` and rates such as ``1.2Mi/1.0Mi`` are not paths.
* **Bare module names**: an inline code span that is a single file name ending in ``.py``
  (``ledger.py``, ``shape.py``) must be the name of some file in the repository: the docs name
  modules by their file name inside a section about their folder, and a script that is not in the
  repository (a tool kept elsewhere) is a dead end for a reader. Other bare names (``kqp.yaml``,
  ``users.yaml``, ``ca.pem``) are files the reader makes, and are not checked.
* **Fenced shell blocks** (``sh``, ``bash``, ``console``, ``shell``): a word that starts with a
  top-level entry of the repository and a ``/`` (``deploy/k8s/shared/``, ``tests/x.py``,
  ``.ci/run``), the paths a command is run with. Other words there (``sed`` expressions, a
  user's ``users.yaml``) and other fenced blocks (YAML, Python, PromQL, console output) are not
  read.

A path is looked up relative to the repository root, then relative to the Markdown file's folder
(``deploy/k8s/README.md`` says ``sidecar/``). A glob (``tests/e2e/test_quota_*.py``) must match at
least one file. ``file.py::name`` also needs ``name`` to be a function or class defined in the file
(``::Class::method`` walks into the class). A path that does not exist passes only when git
ignores it: something a reader makes (``.venv/bin/kqp``, ``deploy/compose/tls/ca.pem``,
``./bench-results``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_files import ROOT

SKIP_DIRS = {".git", ".venv", "node_modules", ".pytest_cache", ".hypothesis", ".ruff_cache"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
SHELLS = {"sh", "bash", "console", "shell"}
SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PATH = re.compile(r"[A-Za-z0-9_.*][A-Za-z0-9_.*/-]*(::[A-Za-z_]\w*)*")
EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")
BARE_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.py")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        found += [Path(folder, f) for f in files if f.endswith(".md")]
    return sorted(p for p in found if not git_ignored(p.relative_to(ROOT).as_posix()))


def file_names() -> set[str]:
    names: set[str] = set()
    for _, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        names.update(files)
    return names


def top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.name not in SKIP_DIRS}


def looks_like_path(text: str, roots: set[str]) -> bool:
    if not PATH.fullmatch(text) or "/" not in text:
        return False
    path = text.split("::", 1)[0]
    first = path.removeprefix("./").split("/", 1)[0]
    return first in roots or path.endswith("/") or bool(EXTENSION.search(path.rsplit("/", 1)[-1]))


def names_in(markdown: str, roots: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(paths, link targets, bare module names) a Markdown text names, by the rule of the module
    docstring."""
    paths: list[str] = []
    links: list[str] = []
    modules: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        opened = FENCE.match(line)
        if opened:
            fence = None if fence is not None else (opened.group(2) or "text")
            continue
        if fence is not None:
            if fence in SHELLS:
                words = (w.strip("()[],;") for w in re.split(r"[\s=\"'<>|]+", line))
                paths += [w for w in words if "/" in w and w.split("/", 1)[0] in roots and PATH.fullmatch(w)]
            continue
        links += LINK.findall(line)
        spans = [span.strip() for _, span in SPAN.findall(LINK.sub("", line))]
        paths += [span for span in spans if looks_like_path(span, roots)]
        modules += [span for span in spans if BARE_MODULE.fullmatch(span)]
    return paths, links, modules


def git_ignored(path: str) -> bool:
    git = shutil.which("git")
    if git is None:
        return False
    for candidate in {path, path.rstrip("/") + "/"}:
        done = subprocess.run([git, "-C", str(ROOT), "check-ignore", "-q", "--no-index", candidate],
                              capture_output=True, timeout=30, check=False)
        if done.returncode == 0:
            return True
    return False


def defines(source: Path, names: list[str]) -> bool:
    """Whether `source` defines names[0] at top level, names[1] inside it, and so on."""
    body: list[ast.stmt] = ast.parse(source.read_text(encoding="utf-8")).body
    for name in names:
        found = [n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                 and n.name == name]
        if not found:
            return False
        body = found[0].body
    return True


def resolve(md: Path, text: str) -> list[Path]:
    path = text.split("::", 1)[0].removeprefix("./")
    for base in (ROOT, md.parent):
        found = sorted(base.glob(path.rstrip("/"))) if any(c in path for c in "*?[") else \
            [base / path] if (base / path).exists() else []
        if found:
            return found
    return []


def path_problem(md: Path, text: str) -> str | None:
    found = resolve(md, text)
    if not found:
        return None if git_ignored(text.removeprefix("./")) else "no such file or folder"
    names = text.split("::")[1:]
    if names and not (found[0].suffix == ".py" and defines(found[0], names)):
        return f"{found[0].relative_to(ROOT)} defines no {'::'.join(names)}"
    return None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation out, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(md: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fence = False
    for line in md.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fence = not fence
        heading = None if fence else HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def link_problem(md: Path, target: str) -> str | None:
    if re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None
    path, _, fragment = target.partition("#")
    dest = (md.parent / path) if path else md
    if not dest.exists():
        return "no such file or folder"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"no heading #{fragment} in {dest.relative_to(ROOT)}"
    return None


def dead_references(md: Path, files: set[str]) -> list[str]:
    paths, links, modules = names_in(md.read_text(encoding="utf-8"), top_level())
    dead = [f"`{p}`: {why}" for p in dict.fromkeys(paths) if (why := path_problem(md, p))]
    dead += [f"({t}): {why}" for t in dict.fromkeys(links) if (why := link_problem(md, t))]
    dead += [f"`{m}`: no file of that name in the repository" for m in dict.fromkeys(modules) if m not in files]
    return dead


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_a_markdown_file_names_exists(md: Path) -> None:
    dead = dead_references(md, file_names())
    assert not dead, f"{md.relative_to(ROOT)} names what does not exist:\n" + "\n".join(dead)


def test_the_repository_has_the_markdown_files_we_read() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "deploy/k8s/README.md", "deploy/spark/README.md"} <= names
    assert not any(n.startswith(".venv/") for n in names)


def test_the_rule_reads_paths_and_leaves_the_rest(tmp_path: Path) -> None:
    roots = top_level()
    text = "\n".join([
        "See `proxy/runtime/edge.py`, `sidecar/`, `kqp/kqp.yaml` and `tests/e2e/test_quota_*.py`.",
        "Not paths: `kqp.proxy.runtime`, `quotas.scope`, `/etc/kqp/kqp.yaml`, `/users/alice`,",
        "`redis://redis:6379/0`, `1.2Mi/1.0Mi`, `RULE:^CN=(.*)$/$1/`, `host:port`, `a b/c.py`.",
        "A [link](deploy/README.md#deploying-kqp) and `tests/deploy/test_docs_paths.py::slug`.",
        "Modules: `ledger.py`, `shape.py`; the reader's own files: `kqp.yaml`, `ca.pem`.",
        "```bash",
        "kubectl apply -f deploy/k8s/shared/ && sed 's/namespace: kqp/namespace: spark/' users.yaml",
        "```",
        "```yaml",
        "cert: deploy/not/read.pem",
        "```",
    ])
    paths, links, modules = names_in(text, roots)
    assert paths == ["proxy/runtime/edge.py", "sidecar/", "kqp/kqp.yaml", "tests/e2e/test_quota_*.py",
                     "tests/deploy/test_docs_paths.py::slug", "deploy/k8s/shared/"]
    assert links == ["deploy/README.md#deploying-kqp"]
    assert modules == ["ledger.py", "shape.py"]


def test_a_dead_path_a_missing_test_and_a_broken_anchor_are_caught(tmp_path: Path) -> None:
    md = ROOT / "tests" / "deploy" / "example.md"        # never written: only its folder is read
    assert path_problem(md, "proxy/runtime/edge.py") is None
    assert path_problem(md, "tests/deploy/test_docs_paths.py::slug") is None
    assert path_problem(md, "proxy/runtime/edgy.py") == "no such file or folder"
    assert path_problem(md, "tests/e2e/test_nothing_*.py") == "no such file or folder"
    assert path_problem(md, "tests/deploy/test_docs_paths.py::no_such_test") is not None
    assert path_problem(md, ".venv/bin/made-by-the-reader") is None          # git ignores it
    assert link_problem(ROOT / "README.md", "deploy/README.md#deploying-kqp") is None
    assert link_problem(ROOT / "README.md", "deploy/README.md#no-such-heading") is not None
    assert link_problem(ROOT / "README.md", "deploy/READ.md") is not None
    assert slug("Quota algorithms: `sampled` or `token_bucket`") == "quota-algorithms-sampled-or-token_bucket"
    text = "A test checks that `shape.py` finds no import cycle; `ledger.py` shares usage.\n"
    md = tmp_path / "x.md"
    md.write_text(text)
    assert dead_references(md, file_names()) == ["`shape.py`: no file of that name in the repository"]
