"""proxy/README.md's walk of one Produce names the code it passes through: every name must exist.

The walk ("One Produce, step by step") is how a newcomer finds their way, so it must not drift from
the code: each `folder/module.py::Name.attribute` it cites is imported and looked up here, and a
step that names nothing is a failure too.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"proxy": "kqp.proxy", "protocol": "kqp.protocol", "quotas": "kqp.quotas", "config": "kqp.config"}
CITED = re.compile(r"`((?:proxy|protocol|quotas|config)/[\w/]+\.py)::([\w.]+)")


def walk() -> list[str]:
    text = (ROOT / "proxy" / "README.md").read_text()
    section = text.split("### One Produce, step by step", 1)[1].split("\n**Tests**", 1)[0]
    return [line for line in section.splitlines() if re.match(r"\d+\. ", line)]


def resolve(path: str, qualname: str) -> object:
    folder, _, rest = path.partition("/")
    module = importlib.import_module(".".join([PACKAGES[folder], *rest.removesuffix(".py").split("/")]))
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def test_every_step_of_the_walk_names_code_that_exists() -> None:
    steps = walk()
    assert len(steps) >= 10, "the walk lost its steps"
    missing = []
    for step in steps:
        cited = CITED.findall(step)
        assert cited, f"a step that names no code: {step[:80]}"
        for path, qualname in cited:
            try:
                resolve(path, qualname)
            except (ImportError, AttributeError) as exc:
                missing.append(f"{path}::{qualname} ({exc})")
    assert not missing, "the walk names code that is not there:\n" + "\n".join(missing)


def test_the_walk_check_finds_a_name_that_is_gone() -> None:
    try:
        resolve("proxy/connection/throttling.py", "Throttling.hold")
    except AttributeError:
        return
    raise AssertionError("Throttling.hold was removed: resolving it must fail")
