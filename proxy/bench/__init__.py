"""kqp bench: side-by-side benchmark of kqp against direct, a bare relay and the tansu proxy.

`kqp bench` (wired by kqp's CLI to :func:`main`) starts a Tansu broker per measurement, runs
batched produce, consume, paced latency and many-connections workloads through every reference in
interleaved rounds, and writes a table, `results.json` and `chart.png`. See `cli` for the presets.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point for `kqp bench [--short] [--out DIR] [--rounds N] ...`."""
    # Imported here so `import kqp.proxy.bench` stays cheap for the CLI that merely wires it.
    from .cli import main as bench_main

    return bench_main(argv)


__all__ = ["main"]
