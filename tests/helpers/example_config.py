"""The example config's commented-out blocks, for tests that check they would load as written."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"


def uncommented(block_start: str) -> str:
    """The example's commented-out block that starts with the line `block_start`, uncommented once."""
    lines = EXAMPLE.read_text().splitlines()
    start = lines.index(block_start)
    indent = len(block_start) - len(block_start.lstrip())
    block = []
    for line in lines[start:]:
        if not line.strip().startswith("#"):
            break
        rest = line[indent:].removeprefix("#")
        block.append(line[:indent] + rest.removeprefix(" "))
    return "\n".join(block)
